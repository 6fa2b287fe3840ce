-- What the PostgreSQL exporter reads of this server's TLS certificate: when the first
-- certificate of ssl_cert_file ends, for deploy/prometheus/postgres-exporter-queries.yaml
-- and the PetstoreCertificateExpiresSoon alert (deploy/prometheus/certificates.yml).
-- The blackbox exporter, which probes every other TLS server, cannot speak
-- PostgreSQL's SSLRequest. Run once as a superuser on the primary, in the petstore
-- database (it replicates: every data node then answers for its own file):
--   psql -d petstore -f deploy/postgres/certificate-monitor.sql
-- It reads the file: after replacing it, reload PostgreSQL (SELECT pg_reload_conf()),
-- which is when new connections get the new certificate (docs/operations/tls.md).
CREATE SCHEMA IF NOT EXISTS certificate_monitor;

-- The DER element at byte `at` of `der` (X.690, definite lengths): the bytes of its
-- tag and length (`head`) and of its content (`size`).
CREATE OR REPLACE FUNCTION certificate_monitor.der_element(der bytea, at integer,
    OUT head integer, OUT size integer)
LANGUAGE plpgsql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    count integer;
BEGIN
    size := get_byte(der, at + 1);
    head := 2;
    IF size >= 128 THEN  -- long form: the next size - 128 bytes hold the length
        count := size - 128;
        size := 0;
        FOR i IN 1..count LOOP
            size := size * 256 + get_byte(der, at + 1 + i);
        END LOOP;
        head := 2 + count;
    END IF;
END
$$;

-- When the first certificate of `pem` ends (Unix seconds).
CREATE OR REPLACE FUNCTION certificate_monitor.not_after(pem text)
RETURNS double precision
LANGUAGE plpgsql IMMUTABLE STRICT SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    der bytea := decode(regexp_replace(substring(pem
        FROM '-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----'), '\s', '', 'g'),
        'base64');
    at integer := 0;
    element record;
    stamp text;
BEGIN
    -- RFC 5280, 4.1: into Certificate and tbsCertificate; past version ([0], when
    -- present), serialNumber, signature and issuer; into validity, past notBefore.
    FOR step IN 1..8 LOOP
        element := certificate_monitor.der_element(der, at);
        IF step IN (1, 2, 7) THEN
            at := at + element.head;
        ELSIF step <> 3 OR get_byte(der, at) = 160 THEN
            at := at + element.head + element.size;
        END IF;
    END LOOP;
    -- notAfter: UTCTime YYMMDDHHMMSSZ (years 1950-2049) or GeneralizedTime YYYYMMDDHHMMSSZ.
    element := certificate_monitor.der_element(der, at);
    stamp := convert_from(substring(der FROM at + element.head + 1 FOR element.size), 'UTF8');
    IF get_byte(der, at) = 23 THEN
        stamp := CASE WHEN left(stamp, 2)::integer >= 50 THEN '19' ELSE '20' END || stamp;
    END IF;
    RETURN extract(epoch FROM make_timestamptz(
        substr(stamp, 1, 4)::integer, substr(stamp, 5, 2)::integer, substr(stamp, 7, 2)::integer,
        substr(stamp, 9, 2)::integer, substr(stamp, 11, 2)::integer, substr(stamp, 13, 2)::integer,
        'UTC'));
END
$$;

-- When the certificate this server presents ends (Unix seconds); NULL with ssl off.
-- Reading the file takes a superuser: the exporter's role (pg_monitor) may call
-- this function and nothing more.
CREATE OR REPLACE FUNCTION certificate_monitor.server_not_after()
RETURNS double precision
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT certificate_monitor.not_after(pg_read_file(current_setting('ssl_cert_file')))
    WHERE current_setting('ssl')::boolean
$$;

REVOKE ALL ON FUNCTION certificate_monitor.server_not_after() FROM PUBLIC;
GRANT USAGE ON SCHEMA certificate_monitor TO pg_monitor;
GRANT EXECUTE ON FUNCTION certificate_monitor.server_not_after() TO pg_monitor;
