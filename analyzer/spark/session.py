"""The SparkSession of a job and what the driver says about it: made quiet (log4j at
ERROR, no UI, Spark's own log in a file of its own), a standalone master checked before
the JVM starts, one-line errors out of Spark's exceptions, a status line on a terminal,
and globs of Hadoop URIs."""
from __future__ import annotations

import os
import re
import shutil
import socket
import sys
import tempfile
import threading
from typing import Any

from analyzer.spark.inputs import SparkJobError

_LOG4J = """status = error
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = spark: %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
"""

# what make_session wrote in the temporary directory, per session: removed by stop_session
_MADE: dict[int, list[str]] = {}


def _support_dir() -> str:
    d = os.path.join(tempfile.gettempdir(), f"kafkawire-spark-{os.getuid() if hasattr(os, 'getuid') else 0}")
    os.makedirs(d, exist_ok=True)
    return d


def _loopback_master(master: str) -> bool:
    return master.startswith("local") or "127.0.0.1" in master or "localhost" in master


def make_session(master: str = "local[*]", shuffle_partitions: int = 8,
                 conf: dict[str, str] | None = None) -> Any:
    """A quiet SparkSession (log4j at ERROR, no UI, no console progress bar).

    Raises SparkJobError with a one-line reason when Spark cannot start (a standalone
    master that does not answer is named within seconds, before the JVM starts). Stop it
    with ``stop_session``, which also removes what this made in the temporary directory."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkJobError("the spark command needs PySpark (pip install 'kafkawire-sniff[spark]', "
                            "i.e. pyspark and pyarrow; and Java 17 or newer)") from None
    check_master(master)
    log4j = os.path.join(_support_dir(), "log4j2.properties")
    with open(log4j, "w") as f:
        f.write(_LOG4J)
    if _loopback_master(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j} -Dlog4j.configurationFile=file:{log4j}"
    b = (SparkSession.builder.master(master).appName("kafkawire-sniff")
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.extraJavaOptions", java_opts)
         .config("spark.executor.extraJavaOptions", java_opts)
         .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
         .config("spark.pyspark.python", sys.executable)
         .config("spark.pyspark.driver.python", sys.executable)
         # the workers import the installed package, not a folder of the same name in the
         # directory Spark starts them in (a source checkout's analyzer/ has no compiled core)
         .config("spark.executorEnv.PYTHONSAFEPATH", "1")
         .config("spark.python.worker.reuse", "true"))
    if _loopback_master(master):
        b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    for k, v in (conf or {}).items():
        b = b.config(k, v)
    # The JVM (and the Python workers it starts) inherit fd 2: point it at a log file while
    # the gateway starts, so JVM warnings and Spark stack traces never reach the user.
    log_path = os.path.join(_support_dir(), f"spark-{os.getpid()}.log")
    start = os.path.getsize(log_path) if os.path.exists(log_path) else 0
    saved = os.dup(2)
    try:
        sys.stderr.flush()
        with open(log_path, "ab") as log:
            os.dup2(log.fileno(), 2)
        spark = b.getOrCreate()
    except Exception as e:  # noqa: BLE001 - Java missing, bad master URL...
        java = "" if (os.environ.get("JAVA_HOME") or shutil.which("java")) else \
            "; Java 17+ must be installed: java on PATH or JAVA_HOME"
        cause = log_cause(log_path, start) or spark_error_text(e)
        raise SparkJobError(f"cannot start Spark ({cause}{java}; Spark's log: {log_path})") from None
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    spark.sparkContext.setLogLevel("ERROR")
    # no code is shipped: the executors' Python (spark.pyspark.python) must have this
    # package installed, native core included (a compiled module cannot travel in a zip
    # of .py files); see the README's "Spark on a cluster"
    _MADE[id(spark)] = [log_path]
    return spark


def log_cause(path: str, start: int = 0) -> str | None:
    """The first exception's message in Spark's log from byte ``start`` (what Spark said
    when its gateway would not start: a master it cannot use, a missing setting)."""
    try:
        with open(path, "rb") as f:
            f.seek(start)
            text = f.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return None
    m = re.search(r"^(?:Exception in thread \S+ )?[\w.$]+(?:Exception|Error): (.+)$", text, re.MULTILINE)
    return m.group(1).strip().rstrip(".") if m else None


def session_log(spark: Any) -> str | None:
    """The file Spark's own log goes to for a session from ``make_session``."""
    made = _MADE.get(id(spark))
    return made[0] if made else None


def stop_session(spark: Any, keep_log: bool = False) -> None:
    """Stop a session from ``make_session`` and remove Spark's log (unless ``keep_log``: a
    failed run names it)."""
    try:
        spark.stop()
    finally:
        made = _MADE.pop(id(spark), [])
        for path in [] if keep_log else made:
            try:
                os.remove(path)
            except OSError:
                pass


def check_master(master: str, timeout: float = 3.0) -> None:
    """A standalone master (``spark://HOST:PORT``, or several comma-separated) must accept a
    TCP connection within ``timeout`` s: Spark itself retries for over a minute and then
    blames Java. Other masters (local, yarn, k8s) are left to Spark."""
    if not master.startswith("spark://"):
        return
    why = []
    for hp in master[len("spark://"):].split(","):
        host, sep, port = hp.strip().rpartition(":")
        if not sep:
            host, port = port, "7077"
        try:
            addr = (host.strip("[]"), int(port))
        except ValueError:
            raise SparkJobError(f"bad master URL {master!r} (expected spark://HOST:PORT)") from None
        try:
            socket.create_connection(addr, timeout=timeout).close()
            return
        except OSError as e:
            why.append(e.strerror or str(e) or type(e).__name__)
    raise SparkJobError(f"the Spark master at {master} did not answer ({'; '.join(sorted(set(why)))}); "
                        "is it running and is the URL right?")


def spark_error_text(e: BaseException) -> str:
    """One line out of a Spark/Py4J exception: the Python error raised in a task if there is one."""
    text = str(e)
    found = re.findall(r"(?:^|\n)\s*(?:[\w.]+\.)?((?:CaptureError|SparkJobError|UserError)): (.+)", text)
    if found:
        return found[-1][1].strip()
    py = re.findall(r"(?:^|\n)\s*((?:[\w.]+\.)?\w+(?:Error|Exception)): (.+)", text)
    for name, msg in reversed(py):
        if "py4j" not in name.lower() and "java" not in name.lower():
            return f"{name.rsplit('.', 1)[-1]}: {msg.strip()}"
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(e).__name__)
    return first[:300]


class StatusLine:
    """A status line on stderr (when it is a terminal) from a SparkStatusTracker polling thread."""

    def __init__(self, sc: Any, enabled: bool, interval: float = 0.5) -> None:
        self.sc = sc
        self.enabled = enabled and sys.stderr.isatty()
        self.interval = interval
        self.phase = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kafkawire-spark-status", daemon=True)
        self._width = 0

    def __enter__(self) -> StatusLine:
        if self.enabled:
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self.enabled:
            self._thread.join(timeout=2)
            self._write("")

    def _write(self, text: str) -> None:
        pad = max(0, self._width - len(text))
        sys.stderr.write("\r" + text + " " * pad + ("\r" if not text else ""))
        sys.stderr.flush()
        self._width = len(text)

    def line(self) -> str:
        tr = self.sc.statusTracker()
        parts = []
        for sid in sorted(tr.getActiveStageIds()):
            info = tr.getStageInfo(sid)
            if info is not None:
                parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks"
                             + (f" ({info.numActiveTasks} running)" if info.numActiveTasks else ""))
        return f"spark: {self.phase}" + (" | " + ", ".join(parts) if parts else "")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._write(self.line()[:200])
            except Exception:  # noqa: BLE001 - the context is stopping
                return


def hadoop_glob(sc: Any, uri: str) -> list[tuple[str, int]]:
    """The files a Hadoop URI (or glob) names, with their sizes, through the driver's FileSystem."""
    jvm = sc._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(sc._jsc.hadoopConfiguration())
    st = fs.globStatus(path)
    if st is None:
        return []
    return sorted((str(x.getPath().toString()), int(x.getLen())) for x in st if x.isFile())
