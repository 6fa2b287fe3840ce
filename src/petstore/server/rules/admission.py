"""Who may call, and how often: one entry point, :meth:`Admission.admit`, for the
API key (interface: Authentication; D12, D13), its scope (D21), the rate limit of
its key (D15, D22) and the limit on failed authentications per client address.

The RateLimit fields of draft-ietf-httpapi-ratelimit-headers are produced here, with
the quota they describe: an answer carries them whatever it turns out to be.
"""

from __future__ import annotations

from lru import LRU

from petstore.server import errors
from petstore.server.rules import ratelimit
from petstore.server.rules.auth import Caller, KeyVerifier, bearer_token, malformed, well_formed
from petstore.server.rules.auth_failures import FailedAuthentications
from petstore.server.rules.ratelimit import RateLimiter

#: A response header: lower-case name and value, latin-1 bytes.
Header = tuple[bytes, bytes]
#: The RateLimit-Policy names: the service's limit for every key (D15), and a key's
#: own limit (D22).
SERVICE_POLICY = ratelimit.POLICY
KEY_POLICY = "key"


#: The verdict on one request: the caller's API key id (None when no valid key was
#: sent), the RateLimit fields its answer carries (D15), and the error it is refused
#: with (None: admitted). A plain tuple: one is made for every request.
Verdict = tuple[int | None, list[Header], errors.PetstoreError | None]


class Admission:
    """Admits requests: the API key ``verifier`` (D12, D13, D21), the ``rate_limiter``
    (D15, D22; None: no limits) and the limit on ``failures`` to authenticate per
    client address (None: no limit)."""

    def __init__(
        self,
        verifier: KeyVerifier,
        rate_limiter: RateLimiter | None,
        failures: FailedAuthentications | None = None,
    ) -> None:
        self.verifier = verifier
        self.rate_limiter = rate_limiter
        self.failures = failures
        # The RateLimit-Policy field of a key's own limit (None: the service's), built
        # once per limit.
        self._policies: LRU[str | None, tuple[bytes, Header]] = LRU(256)
        self._service_policy = self._policy(None) if rate_limiter is not None else None

    async def admit(
        self, authorization: bytes | None, client: tuple[str, int] | None, scope: str
    ) -> Verdict:
        """The verdict on a request whose ``Authorization`` header is ``authorization``
        (as sent; None when absent), sent from ``client`` (address and port; None when
        unknown), for an operation needing ``scope`` (``keys.READ`` or ``keys.WRITE``).

        Refused, in this order: 401 without a well-formed key (no lookup, not
        counted); 429 when the client's address has presented too many keys that are
        not valid and this key is not one this instance knows valid; 401 when the key
        is not valid; 403 when the key lacks ``scope``; 429 when the request is over
        its key's rate limit. A 401 or 403 is not counted against
        the key's budget: neither does any work, and a key's budget is for what it may
        do. With a rate limiter, every verdict carries ``RateLimit-Policy`` (the
        service's when no key is known), and a counted one ``RateLimit`` too. Only a
        failure of the counter store is not an error here: the limiter fails open (D15).
        """
        limiter = self.rate_limiter
        service_policy = self._service_policy
        try:
            token = bearer_token(authorization)
            # A key verified seconds ago: one cache lookup, and no coroutine.
            caller = self.verifier.cached(token) or await self._verify(token, client)
        except errors.PetstoreError as refusal:
            return None, [] if service_policy is None else [service_policy[1]], refusal
        api_key_id = caller.api_key_id
        if service_policy is None:  # no rate limits
            if scope not in caller.scopes:
                return api_key_id, [], self._forbidden(scope)
            return api_key_id, [], None
        own_limit = caller.rate_limit
        name, policy = service_policy if own_limit is None else self._policy(own_limit)
        if scope not in caller.scopes:
            return api_key_id, [policy], self._forbidden(scope)
        assert limiter is not None
        quota = await limiter.hit(api_key_id, own_limit)
        if quota is None:
            return api_key_id, [policy], None
        field = b'"%s";r=%d;t=%d' % (name, quota.remaining, quota.reset)
        headers = [policy, (b"ratelimit", field)]
        if quota.retry_after is None:
            return api_key_id, headers, None
        limited = errors.RateLimited(
            f"rate limit exceeded for this API key; retry in {quota.retry_after} s",
            retry_after=quota.retry_after,
        )
        return api_key_id, headers, limited

    @staticmethod
    def _forbidden(scope: str) -> errors.Forbidden:
        return errors.Forbidden(f"this API key lacks the {scope} scope", scope=scope)

    async def _verify(self, token: bytes, client: tuple[str, int] | None) -> Caller:
        """The caller of the key ``token`` (:func:`bearer_token`), which was not
        verified lately (:meth:`KeyVerifier.cached`), looked up. A malformed key
        costs nothing more and is not counted (401); a well-formed key that is not
        valid is counted against ``client``'s address, and an address over the
        failure limit is refused 429 before a key this instance does not know valid
        is looked up (:mod:`.auth_failures`): the limit stops made-up keys, not the
        good ones."""
        verifier = self.verifier
        if not well_formed(token):
            raise malformed()
        failures = self.failures
        if failures is None:
            return await verifier.lookup(token)
        address = client[0] if client else "-"
        if not verifier.known(token):
            failures.check(address)
        try:
            return await verifier.lookup(token)
        except errors.Unauthorized:
            failures.failed(address)
            raise

    def _policy(self, own_limit: str | None) -> tuple[bytes, Header]:
        """The policy name and ``RateLimit-Policy`` field of a key with ``own_limit``
        (None: the service's limit, :data:`SERVICE_POLICY`; else :data:`KEY_POLICY`)."""
        found = self._policies.get(own_limit)
        if found is None:
            assert self.rate_limiter is not None
            quota, window = self.rate_limiter.policy(own_limit)
            name = (SERVICE_POLICY if own_limit is None else KEY_POLICY).encode()
            field = b'"%s";q=%d;w=%d' % (name, quota, window)
            found = self._policies[own_limit] = (name, (b"ratelimit-policy", field))
        return found
