"""The Python client (``petstore.client``) against a real ``petstore serve``."""
