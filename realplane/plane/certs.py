"""The real plane's PKI, made in Python: one CA, the API server's and KWOK's serving certificates,
the admin client certificate (group system:masters) and the service-account signing key.

Everything is for 127.0.0.1 and lives only in the plane's temporary directory (docs/realplane.md).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_DAY = datetime.timedelta(days=1)
_SERVICE_IP = "10.0.0.1"  # the first address of the plane's --service-cluster-ip-range: the kubernetes Service


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    ca_key: Path
    apiserver_cert: Path
    apiserver_key: Path
    admin_cert: Path
    admin_key: Path
    kubelet_cert: Path
    kubelet_key: Path
    sa_key: Path
    sa_pub: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    path.chmod(0o600)
    return path


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _name(common: str, *orgs: str) -> x509.Name:
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    parts += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in orgs]
    return x509.Name(parts)


def _key_usage(ca: bool) -> x509.KeyUsage:
    """A CA signs certificates; a leaf signs (and, for RSA, enciphers) its handshakes."""
    return x509.KeyUsage(
        digital_signature=True,
        key_encipherment=not ca,
        content_commitment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=ca,
        crl_sign=ca,
        encipher_only=False,
        decipher_only=False,
    )


def _issue(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_name: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    subject: x509.Name,
    usage: list[x509.ObjectIdentifier],
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + 30 * _DAY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(ca=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    )
    if dns or ips:
        names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def make_pki(where: Path) -> Pki:
    """Write the plane's certificates and keys into ``where`` (created) and return their paths."""
    where.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = _key()
    ca_name = _name("realplane-ca")
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _DAY)
        .not_valid_after(now + 30 * _DAY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_key_usage(ca=True), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server = [ExtendedKeyUsageOID.SERVER_AUTH]
    client = [ExtendedKeyUsageOID.CLIENT_AUTH]
    apiserver_key, admin_key, kubelet_key = _key(), _key(), _key()
    apiserver_dns = ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc")
    apiserver = _issue(
        ca_key,
        ca_name,
        apiserver_key,
        _name("kube-apiserver"),
        server,
        dns=(*apiserver_dns, "kubernetes.default.svc.cluster.local"),
        ips=("127.0.0.1", _SERVICE_IP),
    )
    # The API server also presents this one to KWOK's server for pods/exec (--kubelet-client-certificate).
    admin = _issue(ca_key, ca_name, admin_key, _name("kubernetes-admin", "system:masters"), client)
    kubelet = _issue(
        ca_key, ca_name, kubelet_key, _name("kwok-kubelet"), server, dns=("localhost",), ips=("127.0.0.1",)
    )
    # Service-account tokens: RSA, as kube-apiserver and kube-controller-manager expect by default.
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_pub = where / "sa.pub"
    sa_pub.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return Pki(
        ca_cert=_write_cert(where / "ca.crt", ca),
        ca_key=_write_key(where / "ca.key", ca_key),
        apiserver_cert=_write_cert(where / "apiserver.crt", apiserver),
        apiserver_key=_write_key(where / "apiserver.key", apiserver_key),
        admin_cert=_write_cert(where / "admin.crt", admin),
        admin_key=_write_key(where / "admin.key", admin_key),
        kubelet_cert=_write_cert(where / "kubelet.crt", kubelet),
        kubelet_key=_write_key(where / "kubelet.key", kubelet_key),
        sa_key=_write_key(where / "sa.key", sa_key),
        sa_pub=sa_pub,
    )


def _ca(pki: Pki) -> tuple[ec.EllipticCurvePrivateKey, x509.Name]:
    """The plane's CA key and name, read back from its files, to sign one more certificate."""
    ca_key = serialization.load_pem_private_key(pki.ca_key.read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the plane's CA key is not an EC key")
    return ca_key, x509.load_pem_x509_certificate(pki.ca_cert.read_bytes()).subject


def client_cert(pki: Pki, user: str, groups: tuple[str, ...], where: Path) -> tuple[Path, Path]:
    """A client certificate for ``user`` in ``groups`` (the API server reads CN and O), signed by
    the plane's CA: its certificate and key paths in ``where``."""
    ca_key, ca_name = _ca(pki)
    key = _key()
    cert = _issue(ca_key, ca_name, key, _name(user, *groups), [ExtendedKeyUsageOID.CLIENT_AUTH])
    return _write_cert(where / f"{user}.crt", cert), _write_key(where / f"{user}.key", key)


def serving_cert(pki: Pki, name: str, where: Path) -> tuple[Path, Path]:
    """A serving certificate for 127.0.0.1 (a webhook server the API server calls), signed by the
    plane's CA, written as ``tls.crt`` and ``tls.key`` in ``where`` (created), the names
    controller-runtime's webhook and metrics servers read from their certificate directory."""
    ca_key, ca_name = _ca(pki)
    key = _key()
    cert = _issue(
        ca_key, ca_name, key, _name(name), [ExtendedKeyUsageOID.SERVER_AUTH], dns=("localhost",), ips=("127.0.0.1",)
    )
    where.mkdir(parents=True, exist_ok=True)
    return _write_cert(where / "tls.crt", cert), _write_key(where / "tls.key", key)
