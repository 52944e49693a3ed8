"""A single-node Apache Cassandra 5.0 on loopback (Java 17)."""

from __future__ import annotations

from pathlib import Path

from schemas.settings import ServicesSettings
from streams.services.process import quiet_loggers

CASSANDRA_VERSION = "5.0.8"

_JPMS = [
    "--add-exports", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-exports", "java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED",
    "--add-exports", "java.management/com.sun.jmx.remote.security=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.registry=ALL-UNNAMED",
    "--add-exports", "java.rmi/sun.rmi.server=ALL-UNNAMED",
    "--add-exports", "java.sql/java.sql=ALL-UNNAMED",
    "--add-exports", "java.base/java.lang.ref=ALL-UNNAMED",
    "--add-exports", "jdk.unsupported/sun.misc=ALL-UNNAMED",
    "--add-exports", "jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED",
    "--add-exports", "jdk.attach/sun.tools.attach=ALL-UNNAMED",
    "--add-opens", "jdk.compiler/com.sun.tools.javac=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.loader=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.reflect=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.math=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.module=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.util.jar=ALL-UNNAMED",
    "--add-opens", "jdk.management/com.sun.management.internal=ALL-UNNAMED",
    "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens", "java.base/java.lang=ALL-UNNAMED",
    "--add-opens", "java.base/java.util=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
]  # fmt: skip


def cassandra_yaml(settings: ServicesSettings, data_dir: Path) -> str:
    """A minimal single-node configuration (5.0 key names; unknown keys are rejected)."""
    d = data_dir
    return f"""\
cluster_name: 'distill'
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
num_tokens: 1
storage_port: {settings.cassandra_storage_port}
ssl_storage_port: {settings.cassandra_storage_port + 1}
native_transport_port: {settings.cassandra_port}
native_transport_max_frame_size: 64MiB
start_native_transport: true
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters: [{{seeds: "127.0.0.1:{settings.cassandra_storage_port}"}}]
data_file_directories: [{d / "data"}]
commitlog_directory: {d / "commitlog"}
saved_caches_directory: {d / "saved_caches"}
hints_directory: {d / "hints"}
cdc_raw_directory: {d / "cdc_raw"}
cdc_enabled: false
commitlog_sync: periodic
commitlog_sync_period: 10s
commitlog_segment_size: 32MiB
auto_snapshot: false
incremental_backups: false
memtable_allocation_type: heap_buffers
disk_access_mode: standard
authenticator: AllowAllAuthenticator
authorizer: AllowAllAuthorizer
batch_size_warn_threshold: 64KiB
batch_size_fail_threshold: 4MiB
write_request_timeout: 10s
read_request_timeout: 10s
range_request_timeout: 20s
request_timeout: 20s
# Lightweight transactions (epoch switches, stage offsets): the 1 s default timed out CAS
# rounds on a 2-core box running the suite beside Kafka and the stages.
cas_contention_timeout: 5s
# One heap budget shared by every SAI segment build (flushes and compactions). At 64MiB
# a compacted 80 MB recall_docs SSTable held 118 index segments, each repeating per-term
# work at build and query time; at 256MiB it held one (bench_projections, 2 GiB heap).
sai_options:
  segment_write_buffer_size: 256MiB
# Trie memtables for every table (5.0 ships them; skiplist is its default). The recall index's SAI
# postings dominate Cassandra's CPU per event: with every table on the trie memtable the indexer
# used 13-20% less Cassandra CPU per event, and the sustained-rate phase 13-16% less for both stages
# (bench_projections --alter "... memtable = 'skiplist'" against the default, one JVM, 3 paired runs).
# "skiplist" stays defined, so a table can go back: ALTER TABLE ... WITH memtable = 'skiplist'.
memtable:
  configurations:
    skiplist:
      class_name: SkipListMemtable
    trie:
      class_name: TrieMemtable
    default:
      inherits: trie
"""


LOGBACK_XML = """\
<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
  <logger name="org.apache.cassandra" level="INFO"/>
  <logger name="com.datastax" level="WARN"/>
</configuration>
"""


def jvm_command(java: str, jars: Path, data_dir: Path, heap_mb: int) -> list[str]:
    """The ``java … CassandraDaemon`` command line."""
    jamm = next(iter(sorted(jars.glob("jamm-*.jar"))), None)
    agent = [f"-javaagent:{jamm}"] if jamm else []
    return [
        java, f"-Xms{heap_mb}m", f"-Xmx{heap_mb}m", "-Xss256k", "-XX:+UseG1GC",
        "-XX:+ParallelRefProcEnabled", "-XX:MaxTenuringThreshold=1", "-XX:MaxGCPauseMillis=300",
        "-XX:+HeapDumpOnOutOfMemoryError", f"-XX:HeapDumpPath={data_dir}",
        *agent,
        "-Djdk.attach.allowAttachSelf=true", "-Dio.netty.tryReflectionSetAccessible=true",
        "-Dio.netty.allocator.useCacheForAllThreads=true", "-Dio.netty.allocator.maxOrder=11",
        *_JPMS,
        "-Djava.net.preferIPv4Stack=true",
        f"-Dcassandra.config=file://{data_dir / 'cassandra.yaml'}",
        f"-Dcassandra.storagedir={data_dir}",
        f"-Dcassandra.logdir={data_dir / 'logs'}",
        f"-Dlogback.configurationFile={data_dir / 'logback.xml'}",
        "-Dcassandra-foreground=yes",
        "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        "-Dcassandra.initial_token=0",
        "-Dcassandra.ring_delay_ms=0",
        "-Dcassandra.superuser_setup_delay_ms=0",
        # A local dev/test node: system tables (schema changes) are not fsynced.
        "-Dcassandra.unsafesystem=true",
        "-cp", f"{jars}/*",
        "org.apache.cassandra.service.CassandraDaemon",
    ]  # fmt: skip


def release_version(host: str, port: int, timeout_s: float = 5.0) -> str | None:
    """``SELECT release_version FROM system.local``, or ``None`` if Cassandra does not answer."""
    from cassandra.cluster import Cluster
    from cassandra.policies import WhiteListRoundRobinPolicy

    cluster = Cluster(
        [host],
        port=port,
        connect_timeout=timeout_s,
        load_balancing_policy=WhiteListRoundRobinPolicy([host]),
        protocol_version=5,
    )
    with quiet_loggers("cassandra"):
        try:
            session = cluster.connect()
            row = session.execute("SELECT release_version FROM system.local", timeout=timeout_s).one()
            return str(row.release_version) if row else None
        except Exception:  # any failure means "not ready yet"
            return None
        finally:
            cluster.shutdown()
