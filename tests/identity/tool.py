"""The other side of docs/api.md section 16 for tests/it/https.rs and jwt.rs: a test
CA and its certificates, an identity provider's keys and tokens (PyJWT with
cryptography), an HTTPS client (httpx with the test CA), a TLS 1.1 client, and a
key set served over HTTP that counts its fetches.

    python tool.py pki DIR            CA and pairs into DIR
    python tool.py keys DIR           signing keys and DIR/jwks.json
    python tool.py mint DIR < SPECS   one token per JSON spec line, one per line out
    python tool.py get URL CA TOKEN   GET over HTTP/2 (or 1.1), JSON of the answer
    python tool.py tls V HOST PORT    tries TLS V (1.1, 1.2, 1.3) alone, prints the outcome
    python tool.py serve DIR          serves DIR on 127.0.0.1, prints the port, then
                                      one line per GET; GET /fetches: their number
"""

import base64
import datetime
import http.server
import json
import ssl
import sys
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import NameOID


def pem_key(key):
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def certificate(subject, key, issuer, issuer_key, ca):
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        import ipaddress

        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def pki(directory):
    """ca.pem; server.pem/server.key and other.pem/other.key (two pairs the CA
    signed, named `first` and `second`); stray.key, a key of neither."""
    directory = Path(directory)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate("stq test CA", ca_key, "stq test CA", ca_key, True)
    (directory / "ca.pem").write_bytes(ca)
    for name, subject, key in [
        ("server", "first", ec.generate_private_key(ec.SECP256R1())),
        ("other", "second", rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    ]:
        (directory / f"{name}.pem").write_bytes(certificate(subject, key, "stq test CA", ca_key, False))
        (directory / f"{name}.key").write_bytes(pem_key(key))
    (directory / "stray.key").write_bytes(pem_key(ec.generate_private_key(ec.SECP256R1())))


def b64(number):
    raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def jwk(kid, key, alg):
    public = key.public_key()
    if isinstance(key, rsa.RSAPrivateKey):
        numbers = public.public_numbers()
        entry = {"kty": "RSA", "n": b64(numbers.n), "e": b64(numbers.e)}
    elif isinstance(key, ec.EllipticCurvePrivateKey):
        numbers = public.public_numbers()
        entry = {
            "kty": "EC",
            "crv": "P-256",
            "x": base64.urlsafe_b64encode(numbers.x.to_bytes(32, "big")).rstrip(b"=").decode(),
            "y": base64.urlsafe_b64encode(numbers.y.to_bytes(32, "big")).rstrip(b"=").decode(),
        }
    else:
        raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        entry = {"kty": "OKP", "crv": "Ed25519", "x": base64.urlsafe_b64encode(raw).rstrip(b"=").decode()}
    entry.update({"kid": kid, "use": "sig", "alg": alg})
    return entry


# The keys `keys` makes: key id -> (algorithm, generator).
KEYS = {
    "rsa": ("RS256", lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    "pss": ("PS256", lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048)),
    "p256": ("ES256", lambda: ec.generate_private_key(ec.SECP256R1())),
    "ed": ("EdDSA", ed25519.Ed25519PrivateKey.generate),
    "next": ("ES256", lambda: ec.generate_private_key(ec.SECP256R1())),
}


def keys(directory):
    """DIR/KID.key for each of KEYS, DIR/jwks.json with all but `next` (the key a
    rotation adds), DIR/rotated.json with all of them, DIR/KID.jwk.json each alone."""
    directory = Path(directory)
    entries = {}
    for kid, (alg, generate) in KEYS.items():
        key = generate()
        (directory / f"{kid}.key").write_bytes(pem_key(key))
        entries[kid] = jwk(kid, key, alg)
        (directory / f"{kid}.jwk.json").write_text(json.dumps(entries[kid]))
    first = [entry for kid, entry in entries.items() if kid != "next"]
    (directory / "jwks.json").write_text(json.dumps({"keys": first}))
    (directory / "rotated.json").write_text(json.dumps({"keys": list(entries.values())}))


def mint(directory):
    """For each line of stdin, a JSON object {"kid", "alg", "claims", "header"?,
    "key"?}: the token signed with DIR/KEY.key (KEY defaults to KID), its header
    naming KID and the members of "header". `alg` "none" leaves it unsigned; "HS256"
    signs with the public key of DIR/KID.key's JWK as the HMAC secret."""
    import jwt

    directory = Path(directory)
    for line in sys.stdin:
        spec = json.loads(line)
        kid, alg, claims = spec.get("kid"), spec["alg"], spec["claims"]
        # The key signed with, when the header names another (or none).
        signer = spec.get("key", kid)
        header = {"kid": kid} if kid is not None else {}
        header.update(spec.get("header", {}))
        if alg == "none":
            parts = [{"alg": "none", "typ": "JWT", **header}, claims]
            token = ".".join(
                base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode()
                for part in parts
            ) + "."
        elif alg == "HS256":
            secret = (directory / f"{signer}.jwk.json").read_bytes()
            token = hs256(header, claims, secret)
        else:
            key = serialization.load_pem_private_key((directory / f"{signer}.key").read_bytes(), None)
            token = jwt.encode(claims, key, algorithm=alg, headers=header)
        print(token, flush=True)


def hs256(header, claims, secret):
    """HS256 by hand: PyJWT refuses an asymmetric public key as an HMAC secret,
    which is the attack stq must refuse too."""
    import hashlib
    import hmac

    encode = lambda part: base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode()
    message = encode({"alg": "HS256", "typ": "JWT", **header}) + "." + encode(claims)
    signature = hmac.new(secret, message.encode(), hashlib.sha256).digest()
    return message + "." + base64.urlsafe_b64encode(signature).rstrip(b"=").decode()


def get(url, ca, token):
    import httpx

    with httpx.Client(verify=ssl.create_default_context(cafile=ca), http2=True) as client:
        response = client.get(url, headers={"Authorization": f"Bearer {token}"})
        print(
            json.dumps(
                {
                    "status": response.status_code,
                    "http_version": response.http_version,
                    "body": response.json(),
                    "www_authenticate": response.headers.get("www-authenticate"),
                }
            )
        )


def tls(version, host, port):
    import socket

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    # OpenSSL's default security level forbids TLS 1.1 at the client; level 0 lets
    # it offer 1.1, so that what refuses it is the server (an alert it sends).
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    only = {"1.1": ssl.TLSVersion.TLSv1_1, "1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}[version]
    context.minimum_version = only
    context.maximum_version = only
    try:
        with socket.create_connection((host, int(port))) as raw:
            with context.wrap_socket(raw) as tls:
                print(f"connected {tls.version()}")
    except ssl.SSLError as error:
        print(f"refused {error.reason}")


def serve(directory):
    directory = str(directory)
    fetches = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=directory, **kwargs)

        def do_GET(self):
            # The count is read by a GET of /fetches, answered at once: counted
            # before the file is sent, a fetch is seen by the time its client
            # has the file.
            if self.path == "/fetches":
                body = str(len(fetches)).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            fetches.append(self.path)
            print(f"GET {self.path}", flush=True)
            super().do_GET()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    {"pki": pki, "keys": keys, "mint": mint, "get": get, "tls": tls, "serve": serve}[command](
        *arguments
    )
