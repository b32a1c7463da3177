"""A real single-node Apache Kafka broker (KRaft, no ZooKeeper) for integration tests.

The broker jars and their runtime dependencies come from Maven Central through the machine's
``mvn`` and are cached in ``~/.cache/capwatch/kafka-<version>/libs`` (``CAPWATCH_KAFKA_CACHE``
overrides the directory). The broker runs as ``java -cp <jars> kafka.Kafka server.properties`` in
combined broker+controller mode on free 127.0.0.1 ports, in a temporary directory that also holds
its log (``kafka.log``) and is removed on stop.

If ``KAFKA_BOOTSTRAP_SERVERS`` is set, that cluster is used and nothing is started.

``start_kafka_broker(secure=True)`` adds a SASL_SSL listener beside the PLAINTEXT one
(which the readiness probe and other clients keep using): SASL PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512 for the users in ``SECURE_USERS``, TLS with a throw-away CA made by the
``openssl`` command (server certificate for 127.0.0.1), and client certificates required.
The files are in ``broker.tls`` (``TlsFiles``).

Command line (from the repository root)::

    .venv/bin/python -m tests.support.kafka_broker --fetch   # fetch/verify the jar cache only
    .venv/bin/python -m tests.support.kafka_broker           # start, print timings, stop
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.support._proc import (
    ManagedServer,
    free_port,
    start_print_stop,
    stop_process,
    tail,
    wait_until,
)

log = logging.getLogger(__name__)

KAFKA_VERSION = os.environ.get("CAPWATCH_KAFKA_VERSION", "4.1.1")
# kafka_2.13 4.x declares log4j-core and slf4j-api 1.7 but no SLF4J binding: add the log4j2 one.
LOG4J_VERSION = "2.24.3"
SCALA_BINARY = "2.13"
DEPENDENCY_PLUGIN = "3.8.1"
START_TIMEOUT_S = float(os.environ.get("CAPWATCH_KAFKA_START_TIMEOUT", "90"))
STOP_TIMEOUT_S = 10.0
FETCH_TIMEOUT_S = 600.0
_COMPLETE_MARKER = ".complete"

_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>capwatch.tests</groupId>
  <artifactId>kafka-broker-jars</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_{scala}</artifactId>
      <version>{kafka}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""

_LOG4J2 = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log_file}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.apache.name = org.apache.kafka
logger.apache.level = INFO
"""


class KafkaBrokerError(RuntimeError):
    """The broker could not be fetched, started or reached."""


SECURE_USERS = {"capwatch": "capwatch-secret"}
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class TlsFiles:
    """PEM files of a secure broker's throw-away CA and of a client certificate it accepts."""

    ca: Path
    client_cert: Path
    client_key: Path
    other_client_cert: Path
    """Signed by another CA: the broker must refuse it."""
    other_client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    openssl = shutil.which("openssl")
    if openssl is None:
        raise KafkaBrokerError("openssl not found: install the Debian package 'openssl'")
    run = subprocess.run([openssl, *args], cwd=cwd, capture_output=True, text=True,
                         timeout=60, check=False)
    if run.returncode != 0:
        raise KafkaBrokerError(f"openssl {' '.join(args[:2])} failed:\n{run.stderr}")


def make_certificates(d: Path) -> tuple[Path, TlsFiles]:
    """A CA, a server certificate for 127.0.0.1 (PEM key + chain, as Kafka's PEM keystore
    reads it) and client certificates; EC P-256 keys (RSA would take seconds), valid two
    days."""
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def ca(name: str) -> None:
        _openssl("req", "-x509", *key, "-days", "2",
                 "-keyout", f"{name}.key", "-out", f"{name}.crt",
                 "-subj", f"/CN=capwatch test {name}", cwd=d)

    def leaf(name: str, issuer: str, ext: str) -> None:
        (d / f"{name}.ext").write_text(ext)
        _openssl("req", *key, "-keyout", f"{name}.key",
                 "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{issuer}.crt",
                 "-CAkey", f"{issuer}.key", "-CAcreateserial", "-days", "2",
                 "-out", f"{name}.crt", "-extfile", f"{name}.ext", cwd=d)

    ca("ca")
    ca("other-ca")
    leaf("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                         "extendedKeyUsage=serverAuth\n")
    leaf("client", "ca", "extendedKeyUsage=clientAuth\n")
    leaf("other-client", "other-ca", "extendedKeyUsage=clientAuth\n")
    keystore = d / "server.pem"
    keystore.write_text((d / "server.key").read_text() + (d / "server.crt").read_text())
    return keystore, TlsFiles(d / "ca.crt", d / "client.crt", d / "client.key",
                              d / "other-client.crt", d / "other-client.key")


# --------------------------------------------------------------------------- jar cache


def cache_dir(version: str = KAFKA_VERSION) -> Path:
    env = os.environ.get("CAPWATCH_KAFKA_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "capwatch" / f"kafka-{version}"


def fetch_kafka(version: str = KAFKA_VERSION, cache: Path | None = None) -> Path:
    """Return the directory of broker jars, fetching them with ``mvn`` on first use.

    Safe to call from several processes at once (a file lock serialises the fetch); a cache is
    used only once a fetch into it completed.
    """
    root = cache if cache is not None else cache_dir(version)
    libs = root / "libs"
    marker = root / _COMPLETE_MARKER
    stamp = f"kafka_{SCALA_BINARY} {version} log4j {LOG4J_VERSION}\n"

    def cached() -> bool:
        return marker.exists() and marker.read_text() == stamp

    if cached():
        return libs
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cached():
            return libs
        marker.unlink(missing_ok=True)
        mvn = shutil.which("mvn")
        if mvn is None:
            raise KafkaBrokerError("mvn not found: install Maven (Debian package 'maven')")
        work = Path(tempfile.mkdtemp(prefix="fetch-", dir=root))
        try:
            (work / "pom.xml").write_text(
                _POM.format(scala=SCALA_BINARY, kafka=version, log4j=LOG4J_VERSION)
            )
            staged = work / "libs"
            cmd = [
                mvn, "-q", "-B", "-Dstyle.color=never", "-f", str(work / "pom.xml"),
                f"org.apache.maven.plugins:maven-dependency-plugin:{DEPENDENCY_PLUGIN}:copy-dependencies",
                f"-DoutputDirectory={staged}", "-DincludeScope=runtime",
            ]  # fmt: skip
            t0 = time.monotonic()
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S, check=False
            )
            if proc.returncode != 0 or not any(staged.glob(f"kafka_{SCALA_BINARY}-*.jar")):
                raise KafkaBrokerError(
                    f"fetching org.apache.kafka:kafka_{SCALA_BINARY}:{version} with mvn failed"
                    f" (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}"
                )
            if libs.exists():
                shutil.rmtree(libs)
            staged.rename(libs)
            marker.write_text(stamp)
            log.info("fetched Kafka %s jars into %s in %.1fs", version, libs, time.monotonic() - t0)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return libs


# --------------------------------------------------------------------------- helpers


def _cluster_id() -> str:
    # Kafka's Uuid string form: URL-safe base64 of 16 random bytes, no padding (22 chars).
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _die_with_parent() -> list[str]:
    """A command prefix that SIGTERMs the broker if the test process dies without cleaning up.

    util-linux ``setpriv --pdeathsig`` (Linux); no Python runs between fork and exec.
    """
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


def _java() -> str:
    java = shutil.which("java")
    if java is None:
        raise KafkaBrokerError("java not found: install a JRE 17+ (Debian openjdk-17-jre-headless)")
    return java


def _tail(path: Path) -> str:
    return tail(path, 40, "(no log)")


def cluster_is_ready(bootstrap: str, timeout_s: float = 3.0) -> bool:
    """True when a kafka-python admin client can list the cluster's topics."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaConfigurationError

    admin = None
    try:
        ms = int(timeout_s * 1000)
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="capwatch-test-probe",
            request_timeout_ms=ms,
            bootstrap_timeout_ms=ms,
        )
        admin.list_topics()
        return True
    except KafkaConfigurationError:  # our mistake, not "not ready yet"
        raise
    except Exception:  # any other failure means "not ready yet"
        return False
    finally:
        if admin is not None:
            with contextlib.suppress(Exception):
                admin.close()


# --------------------------------------------------------------------------- broker


@dataclass
class KafkaBroker(ManagedServer):
    """A running broker (or an external cluster when ``external`` is true)."""

    bootstrap: str
    external: bool = False
    workdir: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    start_seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)
    secure_bootstrap: str | None = None
    """The SASL_SSL listener (``secure=True`` only)."""
    tls: TlsFiles | None = None
    argv: list[str] = field(default_factory=list)
    """The command that started the broker (for :meth:`start_again`)."""

    @property
    def log_file(self) -> Path | None:
        return self.workdir / "kafka.log" if self.workdir else None

    def kill(self) -> None:
        """SIGKILL the broker (a crash), keeping its directory, ports and data for
        :meth:`start_again`."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_TIMEOUT_S)

    def start_again(self, timeout_s: float = START_TIMEOUT_S) -> float:
        """Start the killed broker again on the same ports with the same data; returns the
        seconds until it answered."""
        if self.workdir is None or not self.argv:
            raise KafkaBrokerError("only a broker this process started can start again")
        if self.process is not None and self.process.poll() is None:
            raise KafkaBrokerError("the broker is still running")
        t0 = time.monotonic()
        with open(self.workdir / "kafka.stdout", "ab") as out:
            self.process = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=out,
                                            stderr=subprocess.STDOUT, cwd=self.workdir)
        process, workdir = self.process, self.workdir

        def ready() -> bool:
            if process.poll() is not None:
                raise KafkaBrokerError(
                    f"Kafka exited with {process.returncode} while starting again:\n"
                    f"{_tail(workdir / 'kafka.stdout')}")
            return cluster_is_ready(self.bootstrap, timeout_s=2.0)

        if not wait_until(ready, timeout_s):
            raise KafkaBrokerError(f"Kafka not ready again on {self.bootstrap} after "
                                   f"{timeout_s:.0f}s:\n{_tail(workdir / 'kafka.log')}")
        return time.monotonic() - t0

    def stop(self, graceful: bool = True) -> None:
        """Stop the broker by PID: SIGTERM, then SIGKILL after a bound; remove its directory.

        ``graceful`` False: SIGKILL at once, for a throw-away broker whose directory goes
        with it (the test session's): its controlled shutdown closes every log segment of
        every topic the suite made, ~10 s (the bound, then SIGKILL) at the end of a
        loaded `make test`, and keeps nothing anyone reads."""
        proc, self.process = self.process, None
        t0 = time.monotonic()
        if proc is not None and not graceful and proc.poll() is None:
            proc.kill()
            proc.wait(STOP_TIMEOUT_S)
            self.timings["stop"] = time.monotonic() - t0
        elif proc is not None and stop_process(proc, STOP_TIMEOUT_S, "Kafka"):
            self.timings["stop"] = time.monotonic() - t0
        if self.workdir is not None and not os.environ.get("CAPWATCH_KEEP_KAFKA_DIR"):
            shutil.rmtree(self.workdir, ignore_errors=True)


def _security_properties(port: int, keystore: Path, ca: Path) -> dict[str, str]:
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in SECURE_USERS.items())
    props = {
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": ",".join(("PLAIN",
                                                                    *SCRAM_MECHANISMS)),
        "listener.name.sasl_ssl.plain.sasl.jaas.config":
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};",
        "listener.name.sasl_ssl.ssl.keystore.type": "PEM",
        "listener.name.sasl_ssl.ssl.keystore.location": str(keystore),
        "listener.name.sasl_ssl.ssl.truststore.type": "PEM",
        "listener.name.sasl_ssl.ssl.truststore.location": str(ca),
        "listener.name.sasl_ssl.ssl.client.auth": "required",
    }
    for m in SCRAM_MECHANISMS:
        props[f"listener.name.sasl_ssl.{m.lower()}.sasl.jaas.config"] = \
            "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    return props


def _server_properties(data: Path, broker_port: int, controller_port: int,
                       secure: dict[str, str] | None = None, secure_port: int = 0) -> str:
    listeners = f"PLAINTEXT://127.0.0.1:{broker_port}"
    if secure is not None:
        listeners += f",SASL_SSL://127.0.0.1:{secure_port}"
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"{listeners},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": listeners,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
        "log.dirs": str(data),
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "auto.create.topics.enable": "true",
        "delete.topic.enable": "true",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
        "log.retention.check.interval.ms": "300000",
        **(secure or {}),
    }
    return "".join(f"{k}={v}\n" for k, v in props.items())


def _jvm_opts(workdir: Path) -> list[str]:
    return [
        "-Xms128m", "-Xmx512m",
        "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}",
        f"-Djava.io.tmpdir={workdir}",
    ]  # fmt: skip


def start_kafka_broker(
    version: str = KAFKA_VERSION, timeout_s: float = START_TIMEOUT_S, *, secure: bool = False
) -> KafkaBroker:
    """Start a fresh broker (or return the ``KAFKA_BOOTSTRAP_SERVERS`` cluster) and wait for it.

    ``secure``: add the SASL_SSL listener (never the external cluster: its security is not
    ours to configure)."""
    external = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if external and not secure:
        t0 = time.monotonic()
        if not wait_until(lambda: cluster_is_ready(external), timeout_s, interval_s=0.5):
            raise KafkaBrokerError(f"KAFKA_BOOTSTRAP_SERVERS={external} is not reachable")
        return KafkaBroker(bootstrap=external, external=True, start_seconds=time.monotonic() - t0)

    timings: dict[str, float] = {}
    t0 = time.monotonic()
    libs = fetch_kafka(version)
    timings["fetch_or_cache"] = time.monotonic() - t0
    java = _java()
    classpath = f"{libs}/*"

    last_error: KafkaBrokerError | None = None
    for _attempt in range(2):  # a second try covers a lost race for a "free" port
        try:
            return _start_once(java, classpath, timeout_s, timings, t0, secure)
        except KafkaBrokerError as e:
            last_error = e
            if "Address already in use" not in str(e):
                break
    assert last_error is not None
    raise last_error


def _start_once(
    java: str, classpath: str, timeout_s: float, timings: dict[str, float], t0: float,
    secure: bool = False,
) -> KafkaBroker:
    workdir = Path(tempfile.mkdtemp(prefix="capwatch-kafka-"))
    broker = KafkaBroker(bootstrap="", workdir=workdir, timings=timings)
    try:
        data = workdir / "data"
        broker_port, controller_port = free_port(), free_port()
        while controller_port == broker_port:
            controller_port = free_port()
        broker.bootstrap = f"127.0.0.1:{broker_port}"
        log_file = workdir / "kafka.log"
        (workdir / "log4j2.properties").write_text(_LOG4J2.format(log_file=log_file))
        props = workdir / "server.properties"
        security: dict[str, str] | None = None
        secure_port = 0
        scram: list[str] = []
        if secure:
            secure_port = free_port()
            while secure_port in (broker_port, controller_port):
                secure_port = free_port()
            certs = workdir / "tls"
            certs.mkdir()
            keystore, broker.tls = make_certificates(certs)
            security = _security_properties(secure_port, keystore, broker.tls.ca)
            broker.secure_bootstrap = f"127.0.0.1:{secure_port}"
            # SCRAM credentials live in the cluster metadata: written when it is formatted.
            for m in SCRAM_MECHANISMS:
                for user, password in SECURE_USERS.items():
                    scram += ["--add-scram", f"{m}=[name={user},password={password}]"]
        props.write_text(_server_properties(data, broker_port, controller_port, security,
                                            secure_port))
        jvm = [java, *_jvm_opts(workdir), "-cp", classpath]

        t1 = time.monotonic()
        fmt = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(props),
             *scram],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        timings["format"] = time.monotonic() - t1
        if fmt.returncode != 0:
            raise KafkaBrokerError(f"kafka-storage format failed:\n{fmt.stdout}{fmt.stderr}")

        t2 = time.monotonic()
        broker.argv = [*_die_with_parent(), *jvm, "kafka.Kafka", str(props)]
        with open(workdir / "kafka.stdout", "wb") as out:
            broker.process = subprocess.Popen(
                broker.argv,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                cwd=workdir,
            )  # fmt: skip
        process = broker.process

        def ready() -> bool:
            if process.poll() is not None:
                raise KafkaBrokerError(
                    f"Kafka exited with {process.returncode} while starting:\n"
                    f"{_tail(workdir / 'kafka.stdout')}\n{_tail(log_file)}"
                )
            return cluster_is_ready(broker.bootstrap, timeout_s=2.0)

        if not wait_until(ready, t2 + timeout_s - time.monotonic()):
            raise KafkaBrokerError(
                f"Kafka not ready on {broker.bootstrap} after {timeout_s:.0f}s:\n{_tail(log_file)}"
            )
        timings["broker_ready"] = time.monotonic() - t2
        broker.start_seconds = time.monotonic() - t0
        log.info("Kafka ready on %s in %.1fs %s", broker.bootstrap, broker.start_seconds, timings)
        return broker
    except BaseException:
        broker.stop()
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fetch", action="store_true", help="only fetch/verify the jar cache")
    parser.add_argument("--version", default=KAFKA_VERSION)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("kafka").setLevel(logging.ERROR)
    if not args.fetch:
        return start_print_stop(
            lambda: start_kafka_broker(args.version),
            lambda b: (
                f"Kafka {args.version} ready on {b.bootstrap} in {b.start_seconds:.1f}s {b.timings}"
            ),
            KafkaBrokerError,
        )
    try:
        t0 = time.monotonic()
        libs = fetch_kafka(args.version)
    except KafkaBrokerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    jars = len(list(libs.glob("*.jar")))
    print(f"Kafka {args.version}: {jars} jars in {libs} ({time.monotonic() - t0:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
