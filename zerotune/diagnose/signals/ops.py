"""DeepSpeed op build signals: a C++/CUDA op (cpu_adam, fused_adam, transformer_inference, ...) that
fails to compile at JIT time or to load afterwards, or a prebuild at pip install that fails to link.

The formats are those of torch.utils.cpp_extension (`Error building extension 'cpu_adam'`, ninja's
"build stopped: subcommand failed"), DeepSpeed's op builders (deepspeed/ops/op_builder/builder.py at
0.19.8: MissingCUDAException, "CUDA_HOME does not exist", ninja missing), and the AttributeError a
half-built DeepSpeedCPUAdam raises later in __del__ ("has no attribute 'ds_opt_adam'"); the build's own
tools failing however the traceback is printed (subprocess's "Command '['ninja', '-v']' returned
non-zero exit status", the linker's "ld: cannot find", and torch.utils.cpp_extension's compiler check
`which c++` failing: no compiler), and an op in torch's JIT cache (torch_extensions/) with an undefined
symbol: built against another torch, or a stale build left when rebuilding failed. The async_io
op is nvme_aio's (signals.memory), a CUDA toolkit that differs from torch's is version_mismatch's.
"""

from __future__ import annotations

import re

from zerotune.diagnose.records import Event
from zerotune.diagnose.signals.signal import Hit, Signal

_BUILD = re.compile(
    r"Error building extension '(\w+)'|[Uu]nable to (?:JIT )?load the (\w+) op|Failed to (?:build|load) (\w+)"
    r"|object has no attribute 'ds_opt_(\w+)'|MissingCUDAException|CUDA_HOME does not exist|CUDA_HOME environment variable is not set"
    r"|Ninja is required to load C\+\+ extensions|ninja: build stopped: subcommand failed"
    r"|No such file or directory: '[^']*(?:nvcc|which|ninja|gcc|g\+\+|c\+\+)'|(\w+)\.so: cannot open shared object file"
    r"|undefined symbol: .*(adam|lamb|lion|adagrad)|fatal error: (?:cuda_\w+|\w+)\.h: No such file"
    r"|^FAILED: (\w+)\.(?:so|o|cuda\.o)\b|_run_ninja_build|nvcc fatal|[Uu]nsupported gpu architec\w+ '(compute_\d+)'"
    r"|ld returned 1 exit status|'[^']*/(?:gcc|g\+\+|c\+\+|nvcc)' failed with exit code"
    r"|/ld: cannot find|Command '\['(?:which', ')?(?:ninja|nvcc|gcc|g\+\+|c\+\+|cmake|make)'"
    r"|torch_extensions/[^:]*?/(\w+)\.so: undefined symbol"
    r"|No module named '(?:deepspeed\.ops\.[\w.]*\.)?(\w+)_op'"
    r"|" + r"(?:^|[\s/])[\w./-]*\.(?:cpp|cc|c|cu|cuh|hip|hpp|h)(?::\d+:\d+:|\(\d+\):) (?:fatal )?error: "
)
"""... a build tool the op build runs that the machine lacks (subprocess's FileNotFoundError: `nvcc`, `ninja`,
the compiler, or the `which` that torch.utils.cpp_extension's check_compiler_ok_for_platform runs on the compiler; OpenMOSS/MOSS#290, a
container without `which`), and an op module the install never built: DeepSpeed's compiled ops load as `<op>_op` modules
(`deepspeed.ops.adam.cpu_adam_op`: DeepSpeed issue 483, cpu_adam left out of the default install by
PR 450; `PyInit_transformer_op`, issue 949), so a missing `*_op` module is a build to redo, not a
version to change. A compiler's own diagnostic in a C/C++/CUDA/HIP source (GCC's and Clang's `FILE:LINE:COL: error:`, nvcc's
`FILE(LINE): error:`; hipcc is Clang) is the build failing wherever the log was cut: DeepSpeed#4552's `setup.py
bdist_wheel` on ROCm 5.7, whose excerpt holds only hipcc's errors in the quantization kernels (no ninja or setuptools
line)."""


_OLD_COMPILER = re.compile(r"Your compiler \(([^)]*?\b(\d+)\.\d+[^)]*)\) may be ABI-incompatible with PyTorch")
MIN_GCC_MAJOR = 5
"""torch.utils.cpp_extension's MINIMUM_GCC_VERSION (5, 0, 0): it warns "Your compiler (c++ 4.8.5) may be
ABI-incompatible with PyTorch!" before building an extension with an older GCC (and builds anyway); PyTorch's
headers need C++14/17, which GCC 4.x does not fully have, so such a JIT build of a DeepSpeed op fails
(DeepSpeed#1435: SageMaker's GCC 4.8.5)."""


def _old_compiler(hit: Hit) -> None:
    m = _OLD_COMPILER.search(hit.line.text)
    if m and int(m.group(2)) < MIN_GCC_MAJOR and hit.scan.old_compiler is None:
        hit.scan.old_compiler = (m.group(1), hit.line)


_CONSTRUCTOR_REFUSAL = re.compile(r"^\s*(?:ValueError|TypeError): ")
CONSTRUCTOR_WINDOW = 12
"""Lines between the optimizer's own refusal and the destructor's AttributeError that follows it (the
"Exception ignored in: ... __del__" block is 5-6 lines; interleaved ranks add a few)."""


def _after_constructor_refusal(hit: Hit) -> bool:
    """DeepSpeedCPUAdam.__init__ calls torch.optim.Optimizer.__init__ before it loads its op (ops/adam/cpu_adam.py),
    so a ValueError/TypeError there ("optimizer got an empty parameter list", torch/optim/optimizer.py) leaves an
    object without `ds_opt_adam` whose __del__ then fails: that AttributeError follows the refusal, not a missing
    op (DeepSpeed#5071: a pipeline stage without trainable parameters)."""
    s = hit.scan
    before = s.exception_before_last if s.last_exception is hit.line else s.last_exception
    return (
        before is not None
        and hit.line.number - before.number <= CONSTRUCTOR_WINDOW
        and _CONSTRUCTOR_REFUSAL.match(before.text) is not None
    )


def _build(hit: Hit) -> None:
    text, s = hit.line.text, hit.scan
    m = _BUILD.search(text)
    if m is None or "async_io" in text or "aio" in (m.group(2) or ""):
        return
    if m.group(4) is not None and _after_constructor_refusal(hit):
        return
    op = next((g for g in m.groups() if g), None)
    if op is not None and op.startswith("compute_"):
        op = None  # nvcc refusing a GPU architecture: the op is the one being built
    if op is None and "building_op" in s.facts:
        op = str(s.facts["building_op"].value)
    if op == "adam":
        op = "cpu_adam"  # ds_opt_adam: DeepSpeedCPUAdam's handle to the cpu_adam op
    s.add(s.build_errors, Event(hit.line, "build", op))


_SETUP_BUILD = re.compile(r"building '(deepspeed\.ops\.[\w.]+)' extension")
_COMPILER_ERROR = re.compile(r"^\s*[*_`>]{0,3}\s*(?:fatal )?error: ")
"""An op built at install time (setuptools' build_ext logs "building 'deepspeed.ops.quantizer.quantizer_op' extension"
before it runs the compiler) with a compiler's `error:` line near it, before or after: the compiler's diagnostic without
its location (a driver error, or one the reporter copied out of the log into their text: DeepSpeed#6795's hipcc error
in markdown bold above the build log), indented as pip shows a build's output or set in markdown emphasis or a quote."""


def _setup_build(hit: Hit) -> None:
    m = _SETUP_BUILD.search(hit.line.text)
    if m is None:
        return
    op = m.group(1).rsplit(".", 1)[-1].removesuffix("_op")
    near = [*hit.before(None), *hit.after(lambda text: False)]
    error = next((line for line in near if _COMPILER_ERROR.match(line.text)), None)
    if error is not None:
        hit.scan.add(hit.scan.build_errors, Event(error, "install_build", op))


SIGNALS = (
    Signal("old_compiler", (rb"ABI-incompatible with PyTorch",), (_old_compiler,)),
    Signal(
        "build_errors",
        (
            rb"Error building extension",
            rb"Unable to (?:JIT )?load the",
            rb"Failed to (?:build|load)",
            rb"MissingCUDAException",
            rb"CUDA_HOME does not exist",
            rb"CUDA_HOME environment variable is not set",
            rb"Ninja is required",
            rb"No such file or directory: '",
            rb"ImportError",  # "... undefined symbol: ..." and a missing .so
            rb"FAILED: ",
            rb"_run_ninja_build",
            rb"Unsupported gpu",
            rb"vcc fatal",  # n-vcc; also without the colon: "nvcc fatal unsupported gpu architecture"
            rb"' failed with exit code",
            rb"No such file",
            rb"No module named '",
            # a compiler's `FILE:LINE:COL: error:` / nvcc's `FILE(LINE): error:` in a C/C++/CUDA/HIP source: the
            # trigger starts at the extension's dot (the `\.` group of Python's frame triggers, scan.py)
            rb"\.(?:cpp|cc|c|cu|cuh|hip|hpp|h)(?::\d+:\d+:|\(\d+\):) (?:fatal )?error: ",
            rb"' extension",  # setuptools' "building 'deepspeed.ops.X_op' extension" (_SETUP_BUILD)
        ),
        (_build, _setup_build),
    ),
)
