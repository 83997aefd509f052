"""Process signals: Python tracebacks and exception lines, ranks that exited badly or were killed
(torch elastic's "failed (exitcode: -9)" and ChildFailedError, DeepSpeed's launcher "exits with
return code = -9", "Killing subprocess", the kernel's "Killed process", a segfault), and signs of a
stuck job (stopped by hand, a py-spy dump, a rendezvous or store-barrier timeout, a log that ends in
start-up)."""

from __future__ import annotations

import re

from zerotune.diagnose.records import Event, Kill
from zerotune.diagnose.signals.nccl import NCCL_ID_WAIT
from zerotune.diagnose.signals.signal import Hit, Signal
from zerotune.schema.launch_line import LAUNCHERS

EXCEPTION_LINE = re.compile(r"^\s*(?:[\w.]+\.)?(?:\w*(?:Error|Exception): |\w+(?:Error|Exception)\s*$)")
"""`RuntimeError: ...`, `torch.OutOfMemoryError: ...`: the last line of a Python traceback; an exception
raised without a message is its bare name (a bare `assert` prints `AssertionError` alone: DeepSpeed#4505)."""


def _traceback(hit: Hit) -> None:
    if "Traceback (most recent call last)" in hit.line.text:
        hit.scan.tracebacks += 1


def _exception(hit: Hit) -> None:
    if EXCEPTION_LINE.match(hit.line.text):
        hit.scan.exception_before_last = hit.scan.last_exception
        hit.scan.last_exception = hit.line
        hit.scan.add(hit.scan.exceptions, hit.line)


_EXIT = re.compile(
    r"exits with return code = (-?\d+)|failed \(exitcode: (-?\d+)\)|return code (-?\d+)|killed by signal (\d+)"
    r"|Signal (\d+) \(SIG\w+\) received|exitcode\s+:\s+(-?\d+)|<Signals\.SIG\w+: (\d+)>|killed by signal: (Killed)"
)


_FAILED_EXIT = re.compile(
    r"exits with return code = (-?\d+)|exitcode\s*:\s*(-?\d+)|returned non-zero exit status (\d+)"
    r"|[Pp]rocess (?:exited|finished) with (?:exit )?code (-?\d+)|died with <Signals\.SIG\w+: (\d+)>"
    r"|: \w+ exited with exit code (\d+)"
)
"""A process's non-zero end as its launcher reports it; the last form is pdsh's (`pdsh@HOST: NODE: ssh exited with
exit code 255`), printed when the remote command it ran on a node, DeepSpeed's multi-node launch or one of its
autotuner's experiments, ended non-zero; 255 is ssh's own failure to connect or log in (DeepSpeed#5709: ssh to
localhost refused, the tuner's run never started)."""
_LAUNCHER_NOT_FOUND = re.compile(
    r"\b(?:" + "|".join(LAUNCHERS) + r"|python[\d.]*): command not found\b"
    r"|command not found: (?:" + "|".join(LAUNCHERS) + r"|python[\d.]*)\b"
)
"""The shell finding no launcher to run (bash: `train.sh: line 56: deepspeed: command not found`, zsh: `command not
found: deepspeed`): the command did not start, and the shell's status is 127 (bash manual, "Exit Status": a command
that is not found). dash's `sh: 1: deepspeed: not found` is left out: its only literal, ": not found", starts with
a byte on most log lines, which would slow the trigger scan (scan.py). The launchers are those a launch line starts with
(schema.launch_line.LAUNCHERS) and the interpreter: a missing helper tool elsewhere in a setup script is not the
run (zai-org/VisualGLM-6B#54: DeepSpeed installed, its `deepspeed` script not on PATH)."""
SHELL_NOT_FOUND_EXIT = 127
_FAILED = ("ChildFailedError", "Segmentation fault", "core dumped", "Fatal Python error")
_NATIVE_ASSERT = re.compile(r"\.(?:c|cc|cpp|cxx|cu|cuh|h|hpp):\d+: .*Assertion [`'].*[`'] failed")
"""glibc's assert() message (`prog: file.cpp:125: int f(...): Assertion `expr' failed.`): a C++ op aborted the
process (SIGABRT, exit -6) with its own message, so the launcher's kills after it are not the OOM killer's
(DeepSpeed#4888: the aio op's completion check, read as host OOM). CUDA's device-side assert prints the same
shape from a kernel (`IndexKernel.cu:93: operator(): block: [0,0,0], thread: [0,0,0] Assertion `...` failed.`,
an index out of bounds, R1-V#10) and the process fails on the next CUDA call."""
SIGABRT_EXIT = -6


def _failed(hit: Hit) -> None:
    """A process that ended badly, whatever the reason: the run failed even if nothing else says why."""
    text = hit.line.text
    m = _FAILED_EXIT.search(text)
    if m:
        code = next(int(g) for g in m.groups() if g is not None)
        if code != 0:
            hit.scan.add(hit.scan.exits, Event(hit.line, "exit", code))
    elif hit.says(*_FAILED):
        hit.scan.add(hit.scan.exits, Event(hit.line, next(p for p in _FAILED if p in text)))
    elif _NATIVE_ASSERT.search(text):
        hit.scan.add(hit.scan.exits, Event(hit.line, "exit", SIGABRT_EXIT))
    elif _LAUNCHER_NOT_FOUND.search(text):
        hit.scan.add(hit.scan.exits, Event(hit.line, "exit", SHELL_NOT_FOUND_EXIT))


_SIGBUS = re.compile(
    r"(?:return code = |exitcode: |exitcode=|exitcode\s+:\s+)-7\b|Signal 7 \(SIGBUS\)|\bSIGBUS\b|\b[Bb]us error\b"
)
"""A process dead of SIGBUS: Python's return code -7 (DeepSpeed's launcher, torch elastic), torch's
"Signal 7 (SIGBUS)", the shell's "Bus error", a DataLoader worker's "Unexpected bus error". A write to a
memory-mapped page the system could not back: in these jobs /dev/shm full (a container's 64 MB default;
NCCL's buffers, DataLoader workers, checkpoint staging use it: DeepSpeed#4002, where the maintainer's
--shm-size fixed it, dlrover PR 1046)."""


def _exit_code(hit: Hit) -> None:
    """An exit code or signal number: -9, 137 (128 + 9) and 9 are SIGKILL; SIGBUS is 7."""
    if _SIGBUS.search(hit.line.text):
        hit.scan.add(hit.scan.kills, Kill(hit.line, 7))
        return
    m = _EXIT.search(hit.line.text)
    if m:
        found = next(g for g in m.groups() if g is not None)
        code = 9 if found == "Killed" else int(found)  # a DataLoader worker "killed by signal: Killed."
        sig = 9 if code in (-9, 137, 9) else None
        if sig or "killed by signal" in hit.line.text:
            hit.scan.add(hit.scan.kills, Kill(hit.line, sig if sig else abs(code)))


_SHELL_KILLED = re.compile(r"(?:^|\])\s*Killed\s*$")
"""The shell's report of a foreground job ended by SIGKILL: "Killed" on its own line, or after the last
tqdm bar when the bar (written with carriage returns) left no newline (`| 0/2 [00:00<?, ?it/s]Killed`)."""


_ELASTIC_TERMINATE = re.compile(r"Sending process \d+ closing signal SIGTERM")
"""torch elastic ending the workers still running (torch/distributed/elastic/multiprocessing/api.py `_close`,
logged as a warning): its agent does so only after a worker of the group failed, so the line alone shows a
failed run (axolotl-ai-cloud/axolotl#1268, a rank killed for host RAM while saving after a resume)."""


_RAY_WORKER_DIED = re.compile(r"Worker exit type: (SYSTEM_ERROR|NODE_OUT_OF_MEMORY)\b")
"""Ray's report of a dead worker (an actor or task process; OpenRLHF, verl): its `WorkerExitType`
(ray src/ray/protobuf/common.proto) is SYSTEM_ERROR when the process died without its own Python error (an
exception in user code is USER_ERROR), i.e. killed or crashed from outside, and NODE_OUT_OF_MEMORY when
Ray's memory monitor killed it. OpenRLHF/OpenRLHF#187: an actor's worker SIGKILLed at the container's memory
limit, reported only as "Worker exit type: SYSTEM_ERROR"."""


def _killed(hit: Hit) -> None:
    """A kill without an exit code: the launcher ending the other ranks, or the kernel's OOM killer."""
    text = hit.line.text
    ray = _RAY_WORKER_DIED.search(text)
    if ray:
        hit.scan.add(hit.scan.kills, Kill(hit.line, 9 if ray.group(1) == "NODE_OUT_OF_MEMORY" else None))
        return
    launcher_kill = _SHELL_KILLED.search(text) or _ELASTIC_TERMINATE.search(text)
    if hit.says("Killing subprocess", "Killed process", "oom-kill") or launcher_kill:
        by_kernel = hit.says("Killed process", "oom-kill")
        hit.scan.add(hit.scan.kills, Kill(hit.line, 9 if by_kernel else None))


# ---- a master port already in use ----------------------------------------------------------------

_PORT_IN_USE = re.compile(
    r"\bEADDRINUSE\b|^(?:[\w.]+\.)?\w*Error: Address already in use\s*$"
    r"|failed to listen on any local network address.*\(errno: 98 - Address already in use\)"
    r"|Tried to launch distributed communication on port"
)
"""The master port held by another process when rank 0 starts the rendezvous store (TCPStore's server) on
MASTER_PORT, in the lines that end the attempt: torch 2.x's one line (DistNetworkError: `port: 29500, useIpv6: 0,
code: -98, name: EADDRINUSE`), torch 1.x's bare `RuntimeError: Address already in use` from the TCPStore
constructor (the text torch elastic's create_c10d_store compares, torch/distributed/elastic/utils/distributed.py
`_ADDRESS_IN_USE`), the RuntimeError that joins c10d's per-address reasons ("failed to listen on any local
network address. The server socket has failed to bind to [::]:29500 (errno: 98 ...)"), and accelerate's own
check before launching (accelerate/utils/launch.py `prepare_multi_gpu_env`: "Tried to launch distributed
communication on port `29500`, but another process is utilizing it"). DeepSpeed's launcher prints none of its
own: it passes --master_port to the ranks (deepspeed/launcher/launch.py sets MASTER_PORT). Not gloo's `pair.cc
... bind: Address already in use` (its own ephemeral ports) nor a server's `OSError: [Errno 98]` (a web app's
port): neither is the master port."""

_BIND_IN_USE = re.compile(r"failed to bind to \S+ \(errno: 98 - Address already in use\)")
"""c10d's warning for one address (socket.cpp tries IPv6, then IPv4): not the end by itself, another address may
still bind; the attempt failed when "failed to listen on any local network address" follows."""

_LISTEN_FAILED = "failed to listen on any local network address"

_PORT = re.compile(r"bind to \S*:(\d+) \(errno: 98|port: (\d+), useIpv6|on port `?(\d+)")


def _port_in_use(hit: Hit) -> None:
    """The attempt's end (kind `in_use`), c10d's per-address errno-98 warnings (`bind`) and its bare "failed to
    listen" line (`listen`): causes.setup.port_in_use needs an end, or a failed listen after an errno-98 bind."""
    text = hit.line.text
    kind = (
        "in_use"
        if _PORT_IN_USE.search(text)
        else "bind"
        if _BIND_IN_USE.search(text)
        else "listen"
        if _LISTEN_FAILED in text
        else None
    )
    if kind is not None:
        m = _PORT.search(text)
        port = int(next(g for g in m.groups() if g is not None)) if m else None
        hit.scan.add(hit.scan.port_conflicts, Event(hit.line, kind, port))


# ---- a stuck job ---------------------------------------------------------------------------------------

_HANG = (
    # the terminal's echo of Ctrl-C (`^C`) opens the line the user typed it on, before whatever the
    # launcher prints next (huggingface/accelerate#2724: `^C[date] ... Killing subprocess`)
    ("interrupted", re.compile(r"^KeyboardInterrupt\b|Received (?:Signals\.)?SIGINT|Signal 2 \(SIGINT\)|^\^C")),
    (
        "py_spy",
        re.compile(
            r"^Thread \d+ \((?:idle|active)\)|^Process \d+: .*python|^(?:Current )?[Tt]hread 0x[0-9a-f]+ \(most recent call first\)"
        ),
    ),
    ("trace_cache", re.compile(r"Invalidate trace cache @ step \d+")),
    # torch's NCCL heartbeat monitor (ProcessGroupNCCL.cpp, torch >= 2.2): the watchdog thread itself
    # made no progress for TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC (default 480 s), so no collective could time
    # out: the process is stuck in a CUDA/NCCL call or holds the GIL (hiyouga/LlamaFactory#6964). The phrase
    # alone, not its "ProcessGroupNCCL's" subject: a terminal's wrap can cut that (om-ai-lab/VLM-R1#257)
    ("watchdog_stuck", re.compile(r"watchdog got stuck for \d+ seconds")),
    (
        "barrier_timeout",
        re.compile(
            r"Timed out initializing process group in store based barrier|RendezvousTimeoutError"
            r"|DistStoreError: Timed out|[Ss]ocket [Tt]imeout|Timed out after \d+ seconds waiting for clients"
            r"|\[c10d\] waitForInput: .*timed out after \d+ms"
        ),
    ),
)
"""A job that made no progress and was stopped by hand (Ctrl-C, a py-spy dump taken to see where it
waits) or whose start-up rendezvous gave up; NCCL's own watchdog timeout is nccl.py's."""

LOOP_STARTING = re.compile(r"\b0/\d+ \[[\d:]+<\?, \?it/s\]")
"""tqdm's bar before its first iteration ends: 0 done, its rate still unknown (`?it/s`)."""

_INIT = re.compile(
    r"Using\s+\S+\s+as PyTorch extensions root|Loading extension module|Time to load \w+ op|Building extension module"
    r"|Initializing TorchBackend|Added key: store_based_barrier_key|NCCL INFO .*Init COMPLETE"
    r"|DeepSpeed info: version=|Waiting for \w+|Waiting in store based barrier|Rank \d+ is waiting"
    r"|Activation Checkpointing Information"
    r"|\[(?:INFO|WARNING)\] \[(?:partition_parameters|parameter_offload|engine|stage3|stage_1_and_2)\.py:\d+:(?!step\])"
    r"|Launching exp_id = \d+|Scheduler wrote ds_config to"
    r"|" + LOOP_STARTING.pattern
)
"""Start-up lines: a log whose last DeepSpeed line is one of these, with no step and no error after
it, stopped while the job was starting (a hang at init: an op build lock, a rendezvous, a barrier).
Not the lines these modules log from the optimizer's `step` (ZeRO-3's "pytorch allocator cache flushes
since last step" warning, `[WARNING] [stage3.py:2391:step]`): those come once per training step
(DeepSpeedExamples#186, EasyContext#11). A tqdm bar at 0 with tqdm's unknown rate (`0/4887 [00:00<?,
?it/s]`, printed before the first iteration ends) is the loop starting, not a step. DeepSpeed's
"Activation Checkpointing Information" block comes once, before the first step ends: from configure()
at 0.19.8 (runtime/activation_checkpointing/checkpointing.py), from the first checkpointed forward in
older releases (THUDM/GLM#157, a multi-node run that stopped there overnight). DeepSpeed's autotuner
starting an experiment ("Scheduler wrote ds_config to", "Launching exp_id = N": autotuning/scheduler.py
run_experiment) is such a start too: each experiment is a fresh launch, and a log that ends there, with no
"Done running exp_id" after it, waits on an experiment that never reported (DeepSpeed#4100: a failed
experiment left the tuner waiting). torch's "Waiting in store based barrier to initialize process group for
rank: N, key: ... (world_size=W, worker_count=C, ...)" (`num_workers_joined=` since torch 2.1) is logged by
distributed_c10d.py `_store_based_barrier` only while fewer than W ranks have joined the new group, every
~10 s until its timeout raises DistStoreError: ranks waiting at start-up for the ones missing (s-JoL/Open-Llama#47:
7 of 8 joined, rank 0 held in wandb's start)."""


def _hang(hit: Hit) -> None:
    if NCCL_ID_WAIT.search(hit.line.text):
        return  # a collective's wait for rank 0 timing out in the store: nccl.py's timeout, no start-up hang
    for kind, pattern in _HANG:
        if pattern.search(hit.line.text):
            hit.scan.add(hit.scan.hangs, Event(hit.line, kind))
            return


def _init(hit: Hit) -> None:
    if _INIT.search(hit.line.text):
        hit.scan.init_line = hit.line
    elif "Done running exp_id" in hit.line.text:
        hit.scan.init_line = None  # the autotuner's experiment reported back: nothing is starting any more


_CANN_CODE = re.compile(rb"(?:^|\n)\s*(?:\[rank\d+\]:\s*)?(E[A-Z]\d{4}): ")
"""Ascend CANN's error code opening its structured message (`EJ0001: <time> Failed to initialize the HCCP
process. Reason: ...`, then `Possible Cause:` and `Solution:` lines: LlamaFactory#3839, #5322)."""


def _vendor_solution(hit: Hit) -> None:
    """The runtime's own advice for the error it reports: the `Solution:` line of a CANN message whose code
    opens one of the three lines before it."""
    text = hit.line.text.strip()
    if not text.startswith("Solution:"):
        return
    before = hit.data[max(0, hit.start - 2048) : hit.start]
    codes = _CANN_CODE.findall(b"\n".join(before.split(b"\n")[-4:]))
    if codes:
        hit.scan.add(hit.scan.vendor_solutions, (codes[-1].decode(), hit.line))


SIGNALS = (
    Signal("vendor_solutions", (rb"Solution: ",), (_vendor_solution,)),
    Signal("tracebacks", (rb"Traceback",), (_traceback,)),
    # an exception raised without a message prints its bare name as the traceback's last line
    # (`NotImplementedError`, gpt-neox#963): a line that ends on the name (EXCEPTION_LINE re-checks the whole line)
    Signal("last_exception", (rb"Error:", rb"Exception:", rb"Error[ \t\r]*(?:\n|\Z)"), (_exception,)),
    Signal(
        "exits",
        (
            rb"xits with return code",
            rb"xited with exit code",  # pdsh's report of a node's remote command (_FAILED_EXIT)
            rb"command not found",  # the shell's, for a launcher (_LAUNCHER_NOT_FOUND; bash, zsh)
            rb"xitcode",
            rb"ChildFailedError",
            rb"Segmentation fault",
            rb"Fatal Python error",
            rb"Process (?:exited|finished) with",
            rb"<Signals\.",
            rb"CalledProcessError",
        ),
        (_failed,),
    ),
    Signal(
        "port_conflicts",
        (
            rb"Address already in use",
            rb"EADDRINUSE",
            rb"Tried to launch distributed communication",
            rb"The server socket has failed to listen",
        ),
        (_port_in_use,),
    ),
    Signal(
        "hangs",
        (
            rb"KeyboardInterrupt",
            rb"SIGINT",
            rb"Thread \d+ \(",
            rb"Process \d+: ",
            rb"Timed out",
            rb"RendezvousTimeoutError",
            rb"DistStoreError",
            rb"Socket Timeout",
            rb"ForInput: ",  # "[c10d] waitForInput: ... timed out"
            rb"Invalidate trace cache",
            rb"\^C",  # the terminal's echo of Ctrl-C
            rb"watchdog got stuck",
            rb"Thread 0x",
            rb"Current thread 0x",
        ),
        (_hang,),
    ),
    Signal(
        "init_line",
        (
            rb"PyTorch extensions root",
            rb"Loading extension module",
            rb"Time to load",
            rb"Building extension module",
            rb"Initializing TorchBackend",
            rb"Added key: store_based",
            rb"Init COMPLETE",
            rb"DeepSpeed info",
            rb"Waiting for",
            rb"Waiting in store based",
            rb"Rank \d+ is waiting",
            rb"Activation Checkpointing Information",
            rb"<\?, \?it/s\]",
            rb"Launching exp_id",
            rb"Scheduler wrote ds_config",
            rb"Done running exp_id",
            rb"INFO\] \[(?:partition_parameters|parameter_offload|engine|stage3|stage_1_and_2)\.py:",
            rb"WARNING\] \[(?:partition_parameters|parameter_offload|engine|stage3|stage_1_and_2)\.py:",
        ),
        (_init,),
    ),
    Signal(
        "kills",
        (
            rb"xits with return code",
            rb"xitcode",
            rb"by signal",  # "killed by signal"
            rb"SIGKILL",
            rb"Sigkill",
            rb"Signal \d",
            rb"Kill",
            rb"SIGTERM",  # torch elastic's "Sending process N closing signal SIGTERM"
            rb"Worker exit type",  # Ray's dead worker
            rb"SIGBUS",
            rb"Bus error",
            rb"Unexpected bus error",  # a DataLoader worker's
        ),
        (_exit_code, _killed),
    ),
)
