"""Kafka's log cleaner threads (``log.cleaner.threads``): each runs one cleaning at a time (``cleaner.run_job``) for
jobs the log manager prepares and swaps in on its own thread; by default each hands its jobs to its own child
process (``cleaner_worker``), so the cleaning does not take the broker's GIL from the event loop."""
from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable

from kbroker.log.cleaner import CleanJob, Throttler, run_job
from kbroker.log.cleaner_worker import CleanerProcess

log = logging.getLogger(__name__)

# Where each cleaner thread runs its jobs: "process" (a child process per thread, cleaner_worker) or "thread".
# kbroker's own switch, for benchmarks and diagnosis; Kafka has no such setting.
MODE_ENV = "KBROKER_LOG_CLEANER"


def _processes_wanted() -> bool:
    mode = os.environ.get(MODE_ENV, "process")
    if mode not in ("process", "thread"):
        log.warning("%s=%r: expected process or thread; the log cleaner runs in child processes", MODE_ENV, mode)
    return mode != "thread"


class CleanerThread:
    """``log.cleaner.threads`` workers running ``run_job`` for jobs submitted from the log manager's thread, each
    job a different log (Kafka's cleaner threads); ``resize`` changes their number at run time. Each worker thread
    hands its jobs to its own child process (``cleaner_worker``), unless ``in_processes`` is false (MODE_ENV)."""

    def __init__(self, threads: int = 1, in_processes: bool | None = None) -> None:
        self._jobs: queue.Queue[CleanJob | None] = queue.Queue()
        self._threads: list[threading.Thread] = []
        self._wanted = max(threads, 1)
        self._started = False
        self._lock = threading.Lock()
        self.current: set[CleanJob] = set()
        self.throttle = Throttler()
        self.in_processes = _processes_wanted() if in_processes is None else in_processes
        self._children: dict[str, CleanerProcess] = {}  # by worker thread name

    @property
    def processes(self) -> dict[str, int]:
        """Worker thread name -> the pid of its cleaner process, for those running one."""
        return {name: pid for name, child in list(self._children.items()) if (pid := child.pid) is not None}

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    @property
    def thread_count(self) -> int:
        """Workers alive now (0 when not started)."""
        return sum(t.is_alive() for t in self._threads)

    @property
    def threads(self) -> int:
        """The number of workers wanted (log.cleaner.threads)."""
        return self._wanted

    @property
    def capacity(self) -> int:
        """Cleanings that may run at once: one per worker (one, inline, without workers)."""
        return self._wanted if self._started else 1

    def start(self) -> None:
        self._started = True
        self._spawn()

    def set_io_rate(self, bytes_per_second: float) -> None:
        """log.cleaner.io.max.bytes.per.second changed (KIP-226): every worker's reads and writes follow it."""
        self.throttle.rate = bytes_per_second

    def resize(self, threads: int) -> None:
        """Start workers up to ``threads``, or let the extra ones end after their current job."""
        with self._lock:
            self._wanted = max(threads, 1)
            self._threads = [t for t in self._threads if t.is_alive()]
            extra = len(self._threads) - self._wanted
        if not self._started:
            return  # start() runs as many
        for _ in range(max(extra, 0)):
            self._jobs.put(None)
        self._spawn()
        log.info("log cleaner: %d threads", self._wanted)

    def _spawn(self) -> None:
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            used = {t.name for t in self._threads}
            n = 0
            while len(self._threads) < self._wanted:
                name = f"kafka-log-cleaner-thread-{n}"
                n += 1
                if name in used:
                    continue
                thread = threading.Thread(target=self._run, name=name, daemon=True)
                thread.start()
                self._threads.append(thread)

    def _run(self) -> None:
        # The child starts with the first job (a few hundred ms of imports, once), not with the thread: a broker
        # whose logs never need cleaning runs none.
        child = CleanerProcess(self.throttle) if self.in_processes else None
        run: Callable[[CleanJob], None] = run_job if child is None else child.run
        name = threading.current_thread().name
        if child is not None:
            self._children[name] = child
        try:
            while True:
                job = self._jobs.get()
                if job is None:
                    return
                try:
                    run(job)
                except BaseException as exc:  # pragma: no cover - run_job records its errors
                    log.exception("%s: cleaner failed: %r", job.tp, exc)
                finally:
                    with self._lock:
                        self.current.discard(job)
        finally:
            self._children.pop(name, None)
            if child is not None:
                child.close()

    def submit(self, job: CleanJob) -> None:
        job.throttle = self.throttle
        with self._lock:
            self.current.add(job)
        if self.running:
            self._jobs.put(job)
        else:
            try:
                run_job(job)
            finally:
                with self._lock:
                    self.current.discard(job)

    def stop(self, timeout: float = 30.0) -> None:
        with self._lock:
            for job in self.current:
                job.cancelled.set()
            threads, self._threads = self._threads, []
            self._started = False
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join(timeout)
