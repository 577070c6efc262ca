#!/usr/bin/env python3
"""The Python anchor of the benchmark harness: the zoo's models as plain PyTorch.

The engine's figures mean little without a reference, so this script trains the six zoo models
(resources/models/*.py) in PyTorch eager and under `torch.compile`, from the same initial
parameters and on the same batches as the C++ harness, and writes its results in the harness's
JSON schema ("symtune-bench", version 1) for a side-by-side comparison.

    build/ci/bin/symtune-bench --preset cpu --export-anchor /tmp/export --output engine.json
    python3 bench/python/anchor.py --export /tmp/export --engine-results engine.json \\
        --output python.json

The harness's export holds one folder per model:

    <model>/module.pt     the initial TorchScript module: parameters, buffers, attributes
    <model>/batches.pt    [(inputs, target)], one per step, warm-up steps first
    <model>/session.json  optimizer, steps, batch size, and every module of the tree (root
                          first): its class, its children in order, its attributes

The model's .py file is executed for its classes, and the eager tree is built from the manifest,
one module per entry, holding clones of the archive's tensors (checked equal to them). Every mode
trains its own copy; the modes take turns step by step, as in the harness, and each step is the
engine trainer's: zero the gradients, forward, cross-entropy on float logits, backward, optimizer
step (PyTorch's default, per parameter on the CPU, where the engine took torch::optim's
per-parameter step; PyTorch's fused step where the engine took its own fused one, which it does on
CUDA unless the session says otherwise: the export's `fused`). Phases within a step are host
times, as the engine takes them; the GPU is waited for at the step's start and end only. Warm-up
steps (where torch.compile
compiles) are not in the medians but their losses are reported; recompiling for new shapes during
measured steps counts.

A step's time runs from its batch in hand, on the device, to the update done, as the harness
times the engine's (which leaves out building its synthetic batch and moving it, reported apart). Peak memory is measured on CUDA only
(the allocator's peak above what was live when the step began) and is null on the CPU.
python-compile's default backend, inductor, needs a C++ compiler on the CPU and Triton on CUDA;
--compile-backend aot_eager traces the same graphs without generating code.

Ratios and loss agreement are taken against python-eager, or with --engine-results against that
run's baseline mode (its config.baseline) of the same model. For the test suite,
--check-first-loss ENGINE.json exits 1 unless every model's python-eager loss at step 0 equals
the engine's within --tolerance (relative): same parameters and same data give the same loss.

--cpu-memory retain keeps freed CPU memory in this process as a session's run.cpu_memory
"retain" does in the engine's (glibc's mmap threshold at 32 MiB and no trimming, set through
mallopt before anything is allocated for the run; docs/session-format.md); the default, system,
runs PyTorch as it comes, as its users run it.
"""

import argparse
import ctypes
import ctypes.util
import json
import math
import os
import statistics
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F

MODES = ("python-eager", "python-compile")
REPO_ROOT = Path(__file__).resolve().parents[2]


class SetupError(Exception):
    """The export, the model files or the options are not what the anchor needs."""


class Sequential(torch.nn.Module):
    """The harness's generated chain (ModuleFactory::sequential): children called in order."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for child in self.children():
            x = child.forward(x)
        return x


@dataclass
class ModelExport:
    folder: Path
    manifest: dict  # session.json
    archive: torch.jit.ScriptModule
    batches: list  # [(inputs, target)]


@dataclass
class StepRecord:
    seconds: float
    forward: float  # forward and loss
    backward: float
    optimizer: float
    loss: float
    peak_bytes: Optional[int]  # CUDA only


# --- The export and the eager model -------------------------------------------------------------


def model_classes(source: Path) -> dict:
    """Class name -> torch.nn.Module class of a model file, plus the generated Sequential."""
    if not source.is_file():
        raise SetupError(f"{source}: no such model file (see --models-dir)")
    # A registered module rather than a bare dict: torch.compile imports a class's __module__.
    module = types.ModuleType(f"symtune_zoo_{source.stem}")
    module.__file__ = str(source)
    module.__dict__.update(torch=torch, F=F, Tensor=torch.Tensor, List=List, Tuple=Tuple,
                           Optional=Optional)
    sys.modules[module.__name__] = module
    exec(compile(source.read_text(), str(source), "exec"), module.__dict__)
    classes = {"Sequential": Sequential}
    classes.update({name: value for name, value in vars(module).items()
                    if isinstance(value, type) and issubclass(value, torch.nn.Module)})
    return classes


def load_batches(path: Path) -> list:
    """The batches that C++ torch::pickle_save wrote."""
    try:
        return torch.load(path, weights_only=False)
    except Exception as error:  # torch.load refused the file: the plain TorchScript unpickler
        try:
            return torch._C._pickle_load_obj(path.read_bytes())
        except Exception:
            raise SetupError(f"{path}: cannot load the batches: {error}") from error


def load_export(folder: Path) -> ModelExport:
    manifest = json.loads((folder / "session.json").read_text())
    for key in ("model", "optimizer", "steps", "warmup", "modules"):
        if key not in manifest:
            raise SetupError(f"{folder / 'session.json'}: no \"{key}\" field")
    batches = load_batches(folder / "batches.pt")
    expected = manifest["warmup"] + manifest["steps"]
    if len(batches) != expected:
        raise SetupError(f"{folder / 'batches.pt'}: {len(batches)} batches, expected {expected} "
                         f"(warmup + steps of session.json)")
    archive = torch.jit.load(str(folder / "module.pt"), map_location="cpu")
    return ModelExport(folder, manifest, archive, batches)


def build_model(export: ModelExport, classes: dict, source: Path) -> torch.nn.Module:
    """The manifest's module tree in eager PyTorch, holding clones of the archive's tensors."""
    built = {}
    for entry in export.manifest["modules"]:
        path, class_name = entry["path"], entry["class"].rsplit(".", 1)[-1]
        if class_name not in classes:
            raise SetupError(f"{export.folder / 'session.json'}: module \"{path}\" has class "
                             f"{class_name}, which {source} does not define")
        cls = classes[class_name]
        module = cls.__new__(cls)  # the model classes have no __init__ of their own
        torch.nn.Module.__init__(module)
        original = export.archive
        for name in filter(None, path.split(".")):
            original = getattr(original, name)
        for name, p in original.named_parameters(recurse=False):
            module.register_parameter(
                name, torch.nn.Parameter(p.detach().clone(), requires_grad=p.requires_grad))
        for name, b in original.named_buffers(recurse=False):
            module.register_buffer(name, b.detach().clone())
        for name, value in entry.get("attributes", {}).items():
            if name != "training":  # train() sets it
                # The archive's value is exact where JSON may have rounded a float.
                setattr(module, name, getattr(original, name, value))
        built[path] = module
    for entry in export.manifest["modules"]:
        parent = entry["path"]
        for child in entry["children"]:
            built[parent].add_module(child, built[f"{parent}.{child}" if parent else child])
    model = built[""]
    check_same_tensors("parameter", dict(model.named_parameters()),
                       dict(export.archive.named_parameters()), export.folder)
    check_same_tensors("buffer", dict(model.named_buffers()),
                       dict(export.archive.named_buffers()), export.folder)
    return model.train()


def check_same_tensors(kind: str, mine: dict, theirs: dict, folder: Path):
    if mine.keys() != theirs.keys():
        raise SetupError(f"{folder}: session.json's tree has {kind}s "
                         f"{sorted(mine.keys() - theirs.keys())} that module.pt lacks, and lacks "
                         f"{sorted(theirs.keys() - mine.keys())}")
    for name, tensor in mine.items():
        assert torch.equal(tensor, theirs[name]), f"{kind} {name} is not module.pt's"


def make_optimizer(spec: dict, params: list) -> torch.optim.Optimizer:
    """The session's optimizer with PyTorch's defaults (betas, eps, and the foreach path where
    PyTorch takes it: on CUDA), or PyTorch's fused step where the engine ran its own fused one
    (`fused` in the export: the engine's default on CUDA)."""
    lr, decay = spec["lr"], spec.get("weight_decay", 0.0)
    fused = {"fused": True} if spec.get("fused") else {}
    if spec["name"] == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=decay, **fused)
    if spec["name"] == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=decay, **fused)
    if spec["name"] == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=spec.get("momentum", 0.0),
                               weight_decay=decay)
    raise SetupError(f"optimizer \"{spec['name']}\": expected adamw, adam or sgd")


# --- Training -----------------------------------------------------------------------------------


@dataclass
class ModeRunner:
    """One mode's own model and optimizer, stepped like the engine's trainer."""

    mode: str
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    backend: str
    steps: List[StepRecord] = field(default_factory=list)

    def __post_init__(self):
        compiled = self.mode == "python-compile"
        self.forward = torch.compile(self.model, backend=self.backend) if compiled else self.model
        self.description = (f"torch.compile, default settings, backend {self.backend}"
                            if compiled else "PyTorch eager")

    def now(self, wait: bool = False) -> float:
        """The host's clock; after the GPU's queue has drained when `wait`. The phases between
        the step's start and end are host times, as the engine's trainer takes them: a wait
        inside the step would drain the queue the next phase launches behind, which the engine's
        step never does."""
        if wait and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def step(self, inputs: list, target: torch.Tensor):
        cuda = self.device.type == "cuda"
        if cuda:
            torch.cuda.synchronize(self.device)
            live = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        inputs = [x.to(self.device, non_blocking=True) if isinstance(x, torch.Tensor) else x
                  for x in inputs]  # sizes and lists (segment lengths, tree levels) stay put
        target = target.to(self.device, non_blocking=True)
        start = self.now(wait=True)
        self.optimizer.zero_grad(set_to_none=True)  # before the closure, as MetaOptimizer does
        forward_start = self.now()
        loss = F.cross_entropy(self.forward(*inputs).float(), target)
        backward_start = self.now()
        loss.backward()
        update_start = self.now()
        self.optimizer.step()
        end = self.now(wait=True)
        peak = torch.cuda.max_memory_allocated(self.device) - live if cuda else None
        self.steps.append(StepRecord(end - start, backward_start - forward_start,
                                     update_start - backward_start, end - update_start,
                                     loss.item(), peak))


class ModelRun:
    """One model's modes, built from its export, stepped a batch at a time."""

    def __init__(self, export: ModelExport, models_dir: Path, modes: list, device: torch.device,
                 backend: str, copies: int = 1):
        self.export = export
        self.manifest = export.manifest
        source = models_dir / f"{self.manifest['model']}.py"
        classes = model_classes(source)
        torch.manual_seed(self.manifest.get("seed", 0))
        if "python-compile" in modes:
            torch._dynamo.reset()  # no compiled code, nor recompile counts, from the last model
        self.runners = []  # [mode][copy]: copies train the same model on the same batches
        for mode in modes:
            self.runners.append([])
            for _ in range(copies):
                model = build_model(export, classes, source).to(device)
                params = [p for p in model.parameters() if p.requires_grad]
                self.runners[-1].append(ModeRunner(
                    mode, model, make_optimizer(self.manifest["optimizer"], params), device,
                    backend))

    @property
    def name(self) -> str:
        return self.manifest["model"]

    def step(self, index: int, copy: int = 0):
        """Like the harness: every mode's step `index` in turn (on the copy `copy` of each),
        rotating which mode goes first."""
        if not 0 <= index < len(self.export.batches):
            raise SetupError(f"{self.name}: no batch {index} in the export "
                             f"({len(self.export.batches)} batches)")
        inputs, target = self.export.batches[index]
        for k in range(len(self.runners)):
            runner = self.runners[(index + k) % len(self.runners)][copy]
            try:
                runner.step(list(inputs), target)
            except Exception as error:
                raise RuntimeError(f"{self.name}, {runner.mode}, step {index}: {error}") from error

    def result(self) -> dict:
        batch_size = (self.manifest.get("batch_size")
                      or int(self.export.batches[0][1].size(0)))
        first = self.runners[0][0].model
        return {"model": self.name, "description": self.manifest.get("description", ""),
                "parameters": sum(p.numel() for p in first.parameters() if p.requires_grad),
                "batch_size": batch_size, "flops_per_step": None, "bytes_per_step": None,
                "modes": [mode_result(copies, self.manifest["warmup"], batch_size)
                          for copies in self.runners]}


def run_model(export: ModelExport, models_dir: Path, modes: list, device: torch.device,
              backend: str) -> dict:
    run = ModelRun(export, models_dir, modes, device, backend)
    for index in range(len(export.batches)):
        run.step(index)
    return run.result()


class Lockstep:
    """The anchor's side of symtune-bench --lockstep (Note [Lockstep with the anchor] in
    bench/harness.h): after each mode's step the harness writes "MODEL STEP SLOT SLOTS" to
    DIR/turn.anchor; the anchor runs the same step on its copy SLOT of the model (it keeps SLOTS
    copies, so that each of its steps follows one of the harness's, as each of the harness's
    follows one of its own) and answers with the same line on DIR/turn.engine. "done" ends the
    run."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.incoming = open(folder / "turn.anchor", "r")  # the harness opens this one first too
        self.outgoing = open(folder / "turn.engine", "w")

    def turns(self):
        """(line, model, step, slot, slots) for every turn, until the harness says "done"."""
        for line in self.incoming:
            line = line.strip()
            if line == "done":
                return
            fields = line.split(" ")
            if len(fields) != 4 or not all(f.isdigit() for f in fields[1:]):
                raise SetupError(f"--lockstep {self.folder}: unexpected turn \"{line}\"")
            step, slot, slots = (int(f) for f in fields[1:])
            if slot >= slots:
                raise SetupError(f"--lockstep {self.folder}: slot {slot} of {slots}")
            yield line, fields[0], step, slot, slots
        raise SetupError(f"--lockstep {self.folder}: the harness stopped before \"done\"")

    def answer(self, line: str):
        self.outgoing.write(line + "\n")
        self.outgoing.flush()


# --- Results ------------------------------------------------------------------------------------


def summary(values: list) -> Optional[dict]:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def mode_result(copies: list, warmup: int, batch_size: int) -> dict:
    """A mode's figures over the measured steps of all its copies; the losses are the first
    copy's (every copy computes the same)."""
    runner = copies[0]
    measured = [s for copy in copies for s in copy.steps[warmup:]]
    losses = [s.loss for s in runner.steps]
    return {"mode": runner.mode, "description": runner.description,
            "samples_per_s": summary([batch_size / s.seconds for s in measured]),
            "step_s": summary([s.seconds for s in measured]),
            "forward_s": summary([s.forward for s in measured]),
            "backward_s": summary([s.backward for s in measured]),
            "optimizer_s": summary([s.optimizer for s in measured]),
            "peak_bytes": summary([s.peak_bytes for s in measured]),
            "losses": losses, "final_loss": losses[-1] if losses else None,
            "ratio": None, "loss_agreement": None, "roofline": None}


def median_of(mode: dict, key: str) -> Optional[float]:
    return mode[key]["median"] if mode.get(key) else None


def relative_deviation(value: Optional[float], reference: Optional[float]) -> float:
    """As the harness computes it; NaN where either loss is missing (the harness writes a NaN
    loss as null)."""
    if value is None or reference is None:
        return math.nan
    return abs(value - reference) / max(abs(reference), 1e-12)


def compare(mode: dict, baseline: dict):
    """Fills `mode`'s ratio and loss agreement against `baseline` (same model, same batches)."""
    def ratio(key):
        mine, theirs = median_of(mode, key), median_of(baseline, key)
        return mine / theirs if mine is not None and theirs else None

    mode["ratio"] = {"samples_per_s": ratio("samples_per_s"), "peak_bytes": ratio("peak_bytes")}
    devs = [relative_deviation(a, b) for a, b in zip(mode["losses"], baseline["losses"])]
    # A loss that is not finite on either side is no agreement (max() would keep or drop its NaN
    # by where it sits): max_rel_dev is then None, as the harness writes it.
    nonfinite = sum(not math.isfinite(d) for d in devs)
    mode["loss_agreement"] = {
        "max_rel_dev": max(devs) if devs and not nonfinite else None,
        "within_1pct": sum(d <= 0.01 for d in devs) / len(devs) if devs else None,
        "nonfinite_steps": nonfinite}


def engine_mode(engine: dict, model: str) -> Optional[dict]:
    """The engine results' baseline mode (its config.baseline) of `model`."""
    for entry in engine["models"]:
        if entry["model"] == model:
            return next((m for m in entry["modes"] if m["mode"] == engine["config"]["baseline"]),
                        None)
    return None


def machine(device: torch.device) -> dict:
    cpu = "unknown"
    try:
        cpu = next(line.split(":", 1)[1].strip()
                   for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": torch.get_num_threads(), "gpu": gpu,
            "torch": torch.__version__, "device": device.type, "runner": "python"}


def finite(value):
    """JSON has no NaN or infinity: a diverged loss is written as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    return value


def print_table(results: list):
    def cell(value, width, spec=".1f", scale=1.0):
        return f"{'-' if value is None else format(value * scale, spec):>{width}}"

    print(f"{'model':<16}{'mode':<16}{'samples/s':>10}{'step ms':>9}{'fwd':>8}{'bwd':>8}"
          f"{'opt':>8}{'peak MiB':>9}{'loss':>9}{'ratio':>7}{'max dev':>9}", file=sys.stderr)
    for model in results:
        for m in model["modes"]:
            ratio, agreement = m["ratio"] or {}, m["loss_agreement"] or {}
            print(f"{model['model']:<16}{m['mode']:<16}"
                  + cell(median_of(m, "samples_per_s"), 10)
                  + "".join(cell(median_of(m, key), 9 if key == "step_s" else 8, scale=1e3)
                            for key in ("step_s", "forward_s", "backward_s", "optimizer_s"))
                  + cell(median_of(m, "peak_bytes"), 9, scale=2.0 ** -20)
                  + cell(m["final_loss"], 9, ".4f") + cell(ratio.get("samples_per_s"), 7, ".2f")
                  + cell(agreement.get("max_rel_dev"), 9, ".1e"), file=sys.stderr)


def check_first_loss(results: list, engine: dict, tolerance: float) -> bool:
    """Whether every model's python-eager loss at step 0 is the engine baseline's."""
    ok = True
    for model in results:
        eager = next((m for m in model["modes"] if m["mode"] == "python-eager"), None)
        reference = engine_mode(engine, model["model"])
        if eager is None or reference is None or not reference["losses"]:
            print(f"first loss: {model['model']}: no python-eager run, or no losses of the "
                  f"engine's {engine['config']['baseline']} mode", file=sys.stderr)
            ok = False
            continue
        mine, theirs = eager["losses"][0], reference["losses"][0]
        dev = relative_deviation(mine, theirs)
        passed = dev <= tolerance  # False for NaN
        ok = ok and passed

        def shown(loss):
            return "null" if loss is None else f"{loss:.8f}"
        print(f"first loss: {model['model']:<16} python-eager {shown(mine)}  engine "
              f"{shown(theirs)}  rel dev {dev:.2e}  {'ok' if passed else 'MISMATCH'}",
              file=sys.stderr)
    return ok


def has_triton() -> bool:
    from torch.utils._triton import has_triton as found
    return found()


def keep_freed_cpu_memory() -> bool:
    """glibc's malloc keeps blocks up to 32 MiB on its heap and does not trim it (Note [Freed
    memory kept] in symtune/runtime/cpu_memory.h); False where the C library is not glibc."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt") or not hasattr(libc, "gnu_get_libc_version"):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3  # malloc.h
    return (libc.mallopt(m_mmap_threshold, 32 << 20) == 1
            and libc.mallopt(m_trim_threshold, 1 << 30) == 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--export", type=Path, required=True,
                        help="the folder symtune-bench --export-anchor wrote")
    parser.add_argument("--models-dir", type=Path, default=REPO_ROOT / "resources" / "models")
    parser.add_argument("--models", default="all", help="comma-separated names, or all")
    parser.add_argument("--modes", default=",".join(MODES), help=f"some of {', '.join(MODES)}")
    parser.add_argument("--device", choices=("cpu", "cuda"),
                        default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, help="intra-op threads (default: torch's)")
    parser.add_argument("--cpu-memory", choices=("system", "retain"), default="system",
                        help="retain: keep freed CPU memory as the engine's run.cpu_memory "
                             "retain does (default: system, PyTorch as it comes)")
    parser.add_argument("--compile-backend", default="inductor",
                        help="python-compile's torch.compile backend (default: inductor)")
    parser.add_argument("--engine-results", type=Path, help="the harness's JSON of the same run")
    parser.add_argument("--check-first-loss", type=Path, metavar="ENGINE.json")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--output", type=Path, help="the JSON (default: stdout)")
    parser.add_argument("--lockstep", type=Path, metavar="DIR",
                        help="take turns step by step with symtune-bench --lockstep DIR (the "
                             "harness says which model and step; side_by_side.py runs both)")
    args = parser.parse_args(argv)
    started = time.perf_counter()

    modes = args.modes.split(",")
    if not set(modes) <= set(MODES):
        parser.error(f"--modes {args.modes}: expected some of {', '.join(MODES)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda, but torch sees no CUDA device")
    compile_on_gpu = "python-compile" in modes and args.device == "cuda"
    if compile_on_gpu and args.compile_backend == "inductor" and not has_triton():
        raise SetupError("python-compile on CUDA: torch.compile's inductor needs Triton, which "
                         "this Python cannot import (install the triton that matches torch "
                         f"{torch.__version__}, or use --compile-backend aot_eager)")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.cpu_memory == "retain" and not keep_freed_cpu_memory():
        print("--cpu-memory retain: the C library is not glibc; nothing changed", file=sys.stderr)
    device = torch.device(args.device)
    results, manifests = [], []
    if args.lockstep:
        lockstep, run = Lockstep(args.lockstep), None
        for line, name, step, slot, slots in lockstep.turns():
            if run is None or run.name != name:
                if run is not None:
                    results.append(run.result())
                export = load_export(args.export / name)
                manifests.append(export.manifest)
                print(f"{name}: {', '.join(modes)} on {device.type}, in lockstep, {slots} "
                      f"copies ...", file=sys.stderr)
                run = ModelRun(export, args.models_dir, modes, device, args.compile_backend,
                               copies=slots)
            if slots != len(run.runners[0]):
                raise SetupError(f"--lockstep: {slots} slots in \"{line}\", {len(run.runners[0])} "
                                 "before")
            run.step(step, slot)
            lockstep.answer(line)
        if run is not None:
            results.append(run.result())
        if not results:
            raise SetupError(f"--lockstep {args.lockstep}: the harness ran no model")
    else:
        folders = sorted(p for p in args.export.iterdir() if (p / "session.json").is_file())
        if args.models != "all":
            wanted = args.models.split(",")
            missing = set(wanted) - {p.name for p in folders}
            if missing:
                parser.error(f"{args.export} holds no export of {', '.join(sorted(missing))}")
            folders = [p for p in folders if p.name in wanted]
        if not folders:
            parser.error(f"{args.export}: no <model>/session.json in it")
        for folder in folders:
            export = load_export(folder)
            manifests.append(export.manifest)
            print(f"{folder.name}: {', '.join(modes)} on {device.type} ...", file=sys.stderr)
            results.append(run_model(export, args.models_dir, modes, device,
                                     args.compile_backend))
    # In lockstep the harness wrote its JSON before "done".
    engine = json.loads(args.engine_results.read_text()) if args.engine_results else None

    for model in results:
        if engine:
            baseline = engine_mode(engine, model["model"])
        else:
            baseline = next((m for m in model["modes"] if m["mode"] == "python-eager"), None)
        for mode in model["modes"]:
            if baseline is not None:
                compare(mode, baseline)

    first = manifests[0]
    report = {"format": "symtune-bench", "version": 1, "machine": machine(device),
              "config": {"preset": first.get("preset"), "steps": first["steps"],
                         "warmup": first["warmup"], "seed": first.get("seed"),
                         "baseline": engine["config"]["baseline"] if engine else "python-eager",
                         "cpu_memory": args.cpu_memory, "modes": modes},
              "probes": None, "models": results, "seconds": time.perf_counter() - started}
    text = json.dumps(finite(report), indent=2)
    if args.output:
        args.output.write_text(text + "\n")
    else:
        print(text)
    print_table(results)

    if args.check_first_loss:
        reference = json.loads(args.check_first_loss.read_text())
        if not check_first_loss(results, reference, args.tolerance):
            print(f"first loss: python-eager is not the engine's within {args.tolerance}",
                  file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SetupError as error:
        print(f"anchor.py: {error}", file=sys.stderr)
        sys.exit(2)
