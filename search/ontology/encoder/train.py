"""``flysift train term-encoder``: the packaged MiniLM fine-tuned on the name/synonym sets of the ontologies a data
dir holds, SapBERT's self-alignment recipe (Liu et al., NAACL 2021) on our own ontologies, then exported and
written as a new version of the artefact (:mod:`.artefact`).

The loss is the multiple-negatives ranking loss: each anchor (a synonym) must pick its positive (its term's name,
sometimes another of its synonyms) among every positive and hard negative of the batch, at cosine scale
``scale``. The plan of each epoch (pairs, hard negatives, batches) is :mod:`.pairs`'; the model's own nearest
wrong terms are mined from the embeddings the previous epoch computed while training (no extra pass).

**Deterministic.** The plan is drawn from the seed; dropout's generator is reseeded from (seed, step) before each
step; torch runs with deterministic algorithms. The same seed, data and thread count give the same weights.

**Resumable.** Every ``checkpoint_s`` seconds and at each epoch's end the weights, the optimizer's moments, the
epoch's plan and the embeddings gathered so far go to ``<data_dir>/term-encoder/partial/`` (safetensors and
``.npy``, no pickle); a new run with the same settings and the same ontologies continues from there (another
setting or another version of an ontology starts afresh, saying so). A resumed run ends with the weights an
uninterrupted one would have.

**Devices.** ``cpu`` (every core this process may use; bfloat16 autocast where the CPU has AVX512-BF16, else
float32) and ``cuda`` (float16 autocast with a gradient scaler). Layers below ``frozen_layers`` and the word
embeddings are frozen: their backward pass and optimizer state cost time on a CPU (training them all, the
``frozen-0`` point of bench/bench_term_encoder_curve.py, cost 1.25x the CPU for about what a higher rate gives free).

Torch and sentence-transformers (the ``dense`` extra) are imported inside the functions: the term service never
imports this module.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from search.core.errors import FlysiftError, IndexMissing, InvalidRequest
from search.core.extras import require
from search.core.stops import StopSignal
from search.ontology.encoder import artefact
from search.ontology.encoder.config import PRECISIONS, TrainConfig
from search.ontology.encoder.labels import SPLITS, LabelTable, split
from search.ontology.encoder.pairs import Corpus, Plan, PlanConfig, anchors, mine, plan
from search.ontology.encoder.runtime import QueryEncoder, write_vectors

if TYPE_CHECKING:
    from search.ontology.model import Ontology
    from search.ontology.service import TermService

DEVICES = ("auto", "cpu", "cuda")
CHECKPOINT_S = 600.0
GRAD_CLIP = 1.0


class TrainingUnavailable(FlysiftError):
    """Training cannot run as asked (device, precision, nothing to train on)."""

    status = 409
    code = "training_unavailable"


class Reporter(Protocol):
    """What training tells a person (search.core.progress.Progress fits)."""

    def stage(self, name: str, *, always: bool = False, **info: Any) -> None: ...

    def update(self, done: int, total: int | None = None) -> None: ...

    def write(self, message: str, *, always: bool = False) -> None: ...


class _Silent:
    def stage(self, name: str, *, always: bool = False, **info: Any) -> None:
        pass

    def update(self, done: int, total: int | None = None) -> None:
        pass

    def write(self, message: str, *, always: bool = False) -> None:
        pass


@dataclass
class Run:
    """How this process trains (not part of the fingerprint: another thread count resumes a checkpoint)."""

    device: str = "cpu"
    threads: int | None = None
    checkpoint_s: float = CHECKPOINT_S
    restart: bool = False
    stop_after_steps: int | None = None   # stop (checkpointed) after this many steps of this run: tests, budgets


# ---- devices ----------------------------------------------------------------------------------------------------

def _torch() -> Any:
    return require("torch", "dense", "flysift train term-encoder")


def resolve_device(device: str, cuda_available: bool | None = None) -> str:
    """``cpu`` or ``cuda`` for ``auto|cpu|cuda``; asking for cuda where torch sees none is one line."""
    device = (device or "auto").strip().lower()
    if device not in DEVICES:
        raise InvalidRequest(f"device: {device[:20]!r} is not one of {', '.join(DEVICES)}",
                             details={"field": "device", "valid": list(DEVICES)})
    if cuda_available is None:
        cuda_available = bool(_torch().cuda.is_available())
    if device == "auto":
        return "cuda" if cuda_available else "cpu"
    if device == "cuda" and not cuda_available:
        raise TrainingUnavailable("--device cuda: torch sees no CUDA GPU here (torch.cuda.is_available() is "
                                  "false): use --device cpu", details={"field": "device"})
    return device


def cpu_has_bf16() -> bool:
    """Whether the CPU multiplies bfloat16 natively (AVX512-BF16 or AMX), where autocast to it pays."""
    try:
        flags = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def resolve_precision(device: str, precision: str, bf16: bool | None = None) -> str:
    """``fp16`` on CUDA (autocast + gradient scaler), ``bf16`` on a CPU that has it, else ``fp32``."""
    if precision not in PRECISIONS:
        raise InvalidRequest(f"precision: one of {', '.join(PRECISIONS)}", details={"field": "precision"})
    if precision == "auto":
        return "fp16" if device == "cuda" else "bf16" if (cpu_has_bf16() if bf16 is None else bf16) else "fp32"
    return precision


class Amp:
    """Autocast and the gradient scaler for one device and precision: float16 scales the loss (its range is
    small), bfloat16 and float32 do not."""

    def __init__(self, device: str, precision: str):
        torch = _torch()
        self.torch = torch
        self.device_type = "cuda" if device.startswith("cuda") else "cpu"
        self.dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[precision]
        self.scaler = torch.amp.GradScaler(self.device_type, enabled=precision == "fp16")

    def autocast(self) -> Any:
        return self.torch.autocast(self.device_type, dtype=self.dtype or self.torch.float32,
                                   enabled=self.dtype is not None)


# ---- one step -----------------------------------------------------------------------------------------------------

#: a step's texts are embedded in this many length-sorted groups, each padded to its own longest (about half of
#: the word pieces of one padded batch of GO labels were padding)
LENGTH_GROUPS = 3


def embed_grouped(model: Any, amp: Amp, texts: list[str], device: str, groups: int = LENGTH_GROUPS) -> Any:
    """The model's embeddings of ``texts`` (with gradients), computed in ``groups`` length-sorted forward passes
    and put back in order."""
    torch = amp.torch
    order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), i))
    size = -(-len(texts) // max(1, groups))
    parts = []
    for s in range(0, len(order), size):
        features = _features(model, [texts[i] for i in order[s:s + size]], device)
        with amp.autocast():
            parts.append(model(features)["sentence_embedding"].float())
    emb = torch.cat(parts)
    inverse = torch.empty(len(order), dtype=torch.long)
    inverse[torch.tensor(order)] = torch.arange(len(order))
    return emb[inverse.to(emb.device)]


def train_step(model: Any, amp: Amp, optimizer: Any, params: list[Any], texts: list[str], n: int, scale: float,
               device: str = "cpu") -> tuple[float, np.ndarray]:
    """One optimisation step on ``3n`` texts (anchors, positives, hard negatives): the multiple-negatives ranking
    loss of each anchor against all ``2n`` candidates. Returns the loss and the ``3n`` unit embeddings (float16)."""
    torch = amp.torch
    functional = torch.nn.functional
    emb = functional.normalize(embed_grouped(model, amp, texts, device), dim=-1)
    logits = scale * emb[:n] @ emb[n:].T
    loss = functional.cross_entropy(logits, torch.arange(n, device=logits.device))
    amp.scaler.scale(loss).backward()
    amp.scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(params, GRAD_CLIP)
    amp.scaler.step(optimizer)
    amp.scaler.update()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach()), emb.detach().to("cpu", torch.float16).numpy()


def lr_at(step: int, total: int, lr: float, warmup: float) -> float:
    """Linear warm-up over the first ``warmup`` share of the steps, then linear decay to zero."""
    warm = max(1, int(total * warmup))
    if step < warm:
        return lr * (step + 1) / warm
    return lr * max(0.0, (total - step) / max(1, total - warm))


def _step_seed(seed: int, step: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}\x00{step}".encode(), digest_size=7).digest(), "big")


# ---- data --------------------------------------------------------------------------------------------------------

@dataclass
class Data:
    tables: list[LabelTable]
    splits: list[list[str]]
    corpus: Corpus

    def digests(self) -> dict[str, str]:
        return {t.ontology: t.digest for t in self.tables}


def load_data(terms: TermService, cfg: TrainConfig) -> Data:
    """The label tables of the ontologies ``terms`` serves (all, or ``cfg.ontologies``) and their split."""
    names = list(cfg.ontologies) or terms.names()
    if not names:
        raise IndexMissing(f"no ontology is indexed in {terms.data_dir}: run `flysift index ontology FILE --name go` "
                           "first (the encoder trains on the indexed ontologies' names and synonyms)")
    tables = [LabelTable.of(terms.ontology(n), hierarchy=True) for n in names]
    splits = [split(t, cfg.split_seed, cfg.test_fraction, cfg.dev_fraction) for t in tables]
    return Data(tables, splits, Corpus(tables, splits, definitions=cfg.definition_share > 0))


def _base_model() -> tuple[str, str]:
    from search.engines.dense import _model_key, model_name

    name = model_name()
    return name, _model_key(name)


def fingerprint(cfg: TrainConfig, data: Data, base_key: str) -> str:
    blob = json.dumps({"config": asdict(cfg), "digests": data.digests(), "base": base_key}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---- checkpoints ---------------------------------------------------------------------------------------------------

@dataclass
class State:
    """Where a training stands (saved with every checkpoint)."""

    fingerprint: str
    epoch: int = 0
    batch: int = 0
    step: int = 0
    total_steps: int = 0
    epochs: list[dict[str, Any]] = field(default_factory=list)
    loss_sum: float = 0.0
    loss_n: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    resumed: int = 0
    scaler: dict[str, Any] = field(default_factory=dict)


def _lock(data_dir: Path) -> Any:
    """One training per data dir: an exclusive lock on ``term-encoder/train.lock`` (released when the process ends),
    or a one-line error."""
    import fcntl

    root = artefact.root(data_dir)
    root.mkdir(parents=True, exist_ok=True)
    fh = open(root / "train.lock", "w")   # noqa: SIM115 (held open for the training: the lock lives with it)
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise TrainingUnavailable(f"another `flysift train term-encoder` is running on {data_dir} (it holds "
                                  f"{root / 'train.lock'}): wait for it or stop it") from None
    return fh


def _partial(data_dir: Path) -> Path:
    return artefact.root(data_dir) / artefact.PARTIAL


def save_checkpoint(data_dir: Path, state: State, model: Any, optimizer: Any, amp: Amp, epoch_plan: Plan,
                    bank: np.ndarray, present: np.ndarray) -> None:
    """Everything a resumed run needs, in a new folder renamed over the old one (safetensors, .npy, JSON)."""
    from safetensors.torch import save_file

    torch = amp.torch
    final = _partial(data_dir)
    tmp = final.with_name(f"{artefact.PARTIAL}.new{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({k: v.detach().to("cpu").contiguous() for k, v in model.state_dict().items()},
              str(tmp / "model.safetensors"))
    opt = optimizer.state_dict()
    tensors, scalars = {}, {}
    for i, st in opt["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                tensors[f"{i}.{k}"] = v.detach().to("cpu").contiguous()
            else:
                scalars[f"{i}.{k}"] = v
    save_file(tensors, str(tmp / "optimizer.safetensors"))
    state.scaler = {k: (float(v) if isinstance(v, float) else v) for k, v in amp.scaler.state_dict().items()}
    flat = np.concatenate(epoch_plan.batches) if epoch_plan.batches else np.zeros(0, np.int64)
    offsets = np.cumsum([0] + [len(b) for b in epoch_plan.batches]).astype(np.int64)
    np.savez(tmp / "plan.npz", anchor=epoch_plan.anchor, positive=epoch_plan.positive,
             negative=epoch_plan.negative, kind=epoch_plan.kind, flat=flat, offsets=offsets)
    np.save(tmp / "bank.npy", bank, allow_pickle=False)
    np.save(tmp / "present.npy", present, allow_pickle=False)
    (tmp / "state.json").write_text(json.dumps({"state": asdict(state), "groups": opt["param_groups"],
                                                "scalars": scalars}))
    old = final.with_name(f"{artefact.PARTIAL}.old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(data_dir: Path, fp: str, model: Any, optimizer: Any, amp: Amp
                    ) -> tuple[State, Plan, np.ndarray, np.ndarray] | str:
    """The saved training if it was made with fingerprint ``fp`` (loaded into ``model`` and ``optimizer``), else
    why not (a sentence)."""
    from safetensors.torch import load_file

    folder = _partial(data_dir)
    if not folder.is_dir():
        old = folder.with_name(f"{artefact.PARTIAL}.old")
        if not old.is_dir():
            return "no checkpoint"
        folder = old
    try:
        saved = json.loads((folder / "state.json").read_text())
        state = State(**saved["state"])
        if state.fingerprint != fp:
            return "the checkpoint was made with other settings or other versions of the ontologies"
        model.load_state_dict(load_file(str(folder / "model.safetensors")))
        tensors = load_file(str(folder / "optimizer.safetensors"))
        opt_state: dict[int, dict[str, Any]] = {}
        for key, value in [*tensors.items(), *saved["scalars"].items()]:
            i, name = key.split(".", 1)
            opt_state.setdefault(int(i), {})[name] = value
        optimizer.load_state_dict({"state": opt_state, "param_groups": saved["groups"]})
        if state.scaler:
            amp.scaler.load_state_dict(state.scaler)
        with np.load(folder / "plan.npz", allow_pickle=False) as z:
            flat, offsets = z["flat"], z["offsets"]
            epoch_plan = Plan(z["anchor"], z["positive"], z["negative"], z["kind"],
                              [flat[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)])
        bank = np.load(folder / "bank.npy", allow_pickle=False)
        present = np.load(folder / "present.npy", allow_pickle=False)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        return f"the checkpoint is unreadable ({type(e).__name__}: {str(e)[:100]})"
    return state, epoch_plan, bank, present


# ---- training ----------------------------------------------------------------------------------------------------

def _load_model(name: str, cfg: TrainConfig, device: str) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    require("sentence_transformers", "dense", "flysift train term-encoder")
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.logging.set_verbosity_error()   # its "Loading weights" bar and notes on every run
    model = SentenceTransformer(name, device=device)
    model.max_seq_length = cfg.max_seq_length
    for pname, p in model.named_parameters():
        layer = _layer_of(pname)
        p.requires_grad_(not ("embeddings." in pname or (layer is not None and layer < cfg.frozen_layers)))
    return model


def _layer_of(pname: str) -> int | None:
    marker = ".layer."
    if marker not in pname:
        return None
    rest = pname.split(marker, 1)[1]
    head = rest.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def _features(model: Any, texts: list[str], device: str) -> dict[str, Any]:
    torch = _torch()
    got = model.preprocess(texts)
    return {k: v.to(device) for k, v in got.items() if torch.is_tensor(v)}


def _epoch_plan(data: Data, cfg: TrainConfig, epoch: int, bank: np.ndarray | None, present: np.ndarray | None
                ) -> Plan:
    mined = None
    if epoch > 0 and bank is not None and present is not None and cfg.model_negative_share > 0:
        wanted = [a for a, _ in anchors(data.corpus, PlanConfig.of(cfg), cfg.seed, epoch)]
        mined = mine(data.corpus, bank, present, wanted)
    return plan(data.corpus, PlanConfig.of(cfg), cfg.seed, epoch, mined)


def _setup(cfg: TrainConfig, run: Run) -> tuple[str, str]:
    """Check the settings and set torch up for this process; returns the device and the precision."""
    cfg.check()
    # OpenMP's idle threads spin by default: on a shared machine that tripled the CPU time of a step (measured)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    torch = _torch()
    device = resolve_device(run.device)
    precision = resolve_precision(device, cfg.precision)
    threads = run.threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    torch.set_num_threads(max(1, int(threads or 1)))
    torch.use_deterministic_algorithms(True, warn_only=True)
    return device, precision


def train(terms: TermService, cfg: TrainConfig | None = None, run: Run | None = None,
          report: Reporter | None = None) -> dict[str, Any]:
    """Train on the ontologies ``terms`` serves, export and publish a new version of its data dir's term encoder;
    returns its manifest. A run stopped by ``run.stop_after_steps`` returns ``{"stopped": True, ...}`` with its
    checkpoint written."""
    data_dir = terms.data_dir
    cfg, run, report = cfg or TrainConfig(), run or Run(), report or _Silent()
    device, precision = _setup(cfg, run)
    t0, c0 = time.perf_counter(), time.process_time()

    report.stage("reading the indexed ontologies' labels")
    data = load_data(terms, cfg)
    lock = _lock(data_dir)
    try:
        base, base_key = _base_model()
        got = _fit(data_dir, cfg, run, report, data, device, precision, t0, c0, base, base_key)
        if isinstance(got, dict):
            return got
        model, dim, training = got
        onts = {t.ontology: terms.ontology(t.ontology) for t in data.tables}
        manifest = _write_version(data_dir, data, cfg, model, dim, report, training, base, base_key, onts)
        shutil.rmtree(_partial(data_dir), ignore_errors=True)
        return manifest
    finally:
        lock.close()


def fit(work_dir: Path, data: Data, cfg: TrainConfig, run: Run | None = None,
        report: Reporter | None = None) -> tuple[Any, dict[str, Any]]:
    """Train on ``data`` (label tables and their split, e.g. a subset: bench/bench_term_encoder_curve.py) and return
    the model and the training record, publishing nothing; checkpoints go under ``work_dir``."""
    run, report = run or Run(), report or _Silent()
    device, precision = _setup(cfg, run)
    t0, c0 = time.perf_counter(), time.process_time()
    lock = _lock(work_dir)
    try:
        base, base_key = _base_model()
        got = _fit(work_dir, cfg, run, report, data, device, precision, t0, c0, base, base_key)
        if isinstance(got, dict):
            raise TrainingUnavailable("the training stopped before its end (checkpoint kept in "
                                      f"{_partial(work_dir)})")
        model, _dim, training = got
        shutil.rmtree(_partial(work_dir), ignore_errors=True)
        model.eval()
        return model, training
    finally:
        lock.close()


def _fit(data_dir: Path, cfg: TrainConfig, run: Run, report: Reporter, data: Data, device: str, precision: str,
         t0: float, c0: float, base: str, base_key: str) -> tuple[Any, int, dict[str, Any]] | dict[str, Any]:
    """The training loop (resuming a checkpoint of the same fingerprint): the model, its dimension and the training
    record, or ``{"stopped": True, ...}``."""
    torch = _torch()
    fp = fingerprint(cfg, data, base_key)
    for t, s in zip(data.tables, data.splits, strict=True):
        report.write(f"{t.ontology} {t.data_version or ''}: {len(t.ids):,} terms, {len(t.texts):,} labels; "
                     f"held out {s.count('test'):,} test and {s.count('dev'):,} dev terms")

    model = _load_model(base, cfg, device)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    amp = Amp(device, precision)
    dim = int((getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension)())
    pairs_per_epoch = data.corpus.pair_count(PlanConfig.of(cfg))

    got: tuple[State, Plan, np.ndarray, np.ndarray] | str = "restart asked for" if run.restart else \
        load_checkpoint(data_dir, fp, model, optimizer, amp)
    if isinstance(got, tuple):
        state, epoch_plan, bank, present = got
        state.resumed += 1
        report.write(f"resuming the checkpoint: epoch {state.epoch + 1}, batch {state.batch:,} "
                     f"(step {state.step:,} of {state.total_steps:,})", always=True)
    else:
        if got not in ("no checkpoint", "restart asked for"):
            report.write(f"starting afresh: {got}", always=True)
        shutil.rmtree(_partial(data_dir), ignore_errors=True)
        empty = np.zeros(0, np.int64)
        epoch_plan = _epoch_plan(data, cfg, 0, None, None) if cfg.epochs else Plan(empty, empty, empty, empty, [])
        # every epoch plans about as many batches as the first (the schedule's length)
        state = State(fp, total_steps=cfg.epochs * len(epoch_plan.batches))
        bank = np.zeros((len(data.corpus.texts), dim), dtype=np.float16)
        present = np.zeros(len(data.corpus.texts), dtype=bool)

    run_steps = 0
    last_save = time.perf_counter()
    texts = data.corpus.texts

    def elapsed() -> tuple[float, float]:
        return state.seconds + time.perf_counter() - t0, state.cpu_seconds + time.process_time() - c0

    def checkpoint() -> None:
        nonlocal last_save
        w, c = elapsed()
        saved = replace(state, seconds=w, cpu_seconds=c)
        save_checkpoint(data_dir, saved, model, optimizer, amp, epoch_plan, bank, present)
        last_save = time.perf_counter()

    model.train()
    stop = StopSignal()   # Ctrl-C or SIGTERM: finish the step, checkpoint, stop (a second one stops at once)
    try:
        while state.epoch < cfg.epochs:
            nb = len(epoch_plan.batches)
            if state.batch == 0:
                report.stage(f"epoch {state.epoch + 1}/{cfg.epochs}: {len(epoch_plan.anchor):,} pairs in "
                             f"{nb:,} batches", always=True, negatives=epoch_plan.kind_counts())
            e0, ec0 = time.perf_counter(), time.process_time()
            while state.batch < nb:
                if (run.stop_after_steps is not None and run_steps >= run.stop_after_steps) or stop.asked:
                    checkpoint()
                    report.write(f"stopped at step {state.step:,} (epoch {state.epoch + 1}, batch {state.batch:,}), "
                                 "checkpoint saved: run the same command again to continue", always=True)
                    return {"stopped": True, "epoch": state.epoch, "batch": state.batch, "step": state.step}
                idx = epoch_plan.batches[state.batch]
                n = len(idx)
                rows = np.concatenate([epoch_plan.anchor[idx], epoch_plan.positive[idx], epoch_plan.negative[idx]])
                for g in optimizer.param_groups:
                    g["lr"] = lr_at(state.step, max(state.total_steps, 1), cfg.lr, cfg.warmup)
                torch.manual_seed(_step_seed(cfg.seed, state.step))
                loss, emb = train_step(model, amp, optimizer, params, [texts[r] for r in rows], n, cfg.scale, device)
                bank[rows] = emb
                present[rows] = True
                state.loss_sum += loss
                state.loss_n += 1
                state.batch += 1
                state.step += 1
                run_steps += 1
                report.update(state.batch, nb)
                if time.perf_counter() - last_save > run.checkpoint_s and state.batch < nb:
                    checkpoint()
            w, c = time.perf_counter() - e0, time.process_time() - ec0
            summary = {"epoch": state.epoch + 1, "pairs": int(len(epoch_plan.anchor)), "batches": nb,
                       "loss": round(state.loss_sum / max(1, state.loss_n), 4), "negatives": epoch_plan.kind_counts(),
                       "seconds_this_run": round(w, 1), "cpu_seconds_this_run": round(c, 1)}
            state.epochs.append(summary)
            report.write(f"epoch {state.epoch + 1}/{cfg.epochs}: mean loss {summary['loss']:.3f}, {w / 60:.1f} min "
                         f"wall, {c / 60:.1f} min CPU", always=True)
            state.epoch += 1
            state.batch = 0
            state.loss_sum, state.loss_n = 0.0, 0
            if state.epoch < cfg.epochs:
                report.stage("mining the model's nearest wrong terms for the next epoch")
                epoch_plan = _epoch_plan(data, cfg, state.epoch, bank, present)
                bank = np.zeros_like(bank)
                present = np.zeros_like(present)
                checkpoint()
    finally:
        stop.restore()
    train_w, train_c = elapsed()
    model.eval()
    return model, dim, {
        "device": device, "precision": precision, "threads": torch.get_num_threads(), "epochs": state.epochs,
        "steps": state.step, "pairs_per_epoch": pairs_per_epoch, "resumed": state.resumed,
        "seconds": round(train_w, 1), "cpu_seconds": round(train_c, 1)}


# ---- the artefact ---------------------------------------------------------------------------------------------------

def _write_version(data_dir: Path, data: Data, cfg: TrainConfig, model: Any, dim: int, report: Reporter,
                   training: dict[str, Any], base: str, base_key: str, onts: dict[str, Ontology]) -> dict[str, Any]:
    """Save, export, embed every label, score the held-out terms, choose the fusion weights on the dev terms
    (:func:`tune`), write the manifest and publish."""
    from search.engines.dense import _export_onnx

    folder = artefact.staging(data_dir)
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        report.stage("saving the model and exporting it to ONNX (int8)")
        model.to("cpu")
        model.save(str(folder / artefact.MODEL_DIR), create_model_card=False, safe_serialization=True)
        _export_onnx(str(folder / artefact.MODEL_DIR), folder, int8=True)
        for extra in ("model.onnx", "export.lock"):
            (folder / extra).unlink(missing_ok=True)
        export_s = (time.perf_counter() - t0, time.process_time() - c0)

        t1, c1 = time.perf_counter(), time.process_time()
        threads = max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)
        encoder = QueryEncoder(folder / artefact.ONNX_FILE, folder / artefact.MODEL_DIR / "tokenizer.json",
                               cfg.max_seq_length, threads=threads)
        entries: dict[str, Any] = {}
        metrics: dict[str, Any] = {}
        held_out: dict[str, Any] = {}
        for table, parts in zip(data.tables, data.splits, strict=True):
            report.stage(f"embedding {len(table.texts):,} labels of {table.ontology}")
            vectors = encoder.encode_many(table.texts, progress=report.update)
            if len(table.texts) > artefact.EXACT_MAX:
                report.stage(f"building the HNSW graph of {table.ontology}")
            entries[table.ontology] = {
                **write_vectors(folder, table, vectors), "split_terms": {s: parts.count(s) for s in SPLITS},
                "training_pairs": sum(min(len(table.labels_of[t]) - 1, cfg.max_pairs_per_term)
                                      for t, s in enumerate(parts) if s == "train")}
            held_out[table.ontology] = {s: [tid for tid, p in zip(table.ids, parts, strict=True) if p == s]
                                        for s in ("test", "dev")}
            metrics[table.ontology] = {s: heldout_metrics(table, parts, vectors.astype(np.float32), s)
                                       for s in ("test", "dev")}
        embed_s = (time.perf_counter() - t1, time.process_time() - c1)
        created = datetime.now(UTC)
        stamp = created.strftime("%Y%m%dT%H%M%S")
        digest = hashlib.sha256(json.dumps([asdict(cfg), data.digests(), base_key]).encode()).hexdigest()[:8]
        version = f"te-{stamp}-{digest}"
        manifest = {
            "format": artefact.FORMAT, "kind": artefact.KIND, "version": version,
            "created": created.isoformat(timespec="seconds"),
            "base_model": {"name": Path(base).name, "key": base_key}, "dim": dim,
            "max_seq_length": cfg.max_seq_length, "seed": cfg.seed, "config": asdict(cfg),
            "split": {"seed": cfg.split_seed, "test": cfg.test_fraction, "dev": cfg.dev_fraction,
                      "rule": "a term is held out by a hash of (split seed, ontology, id); held-out terms are "
                              "withheld from training (names and synonyms) and from nothing else"},
            "ontologies": entries, "held_out": held_out, "metrics": metrics,
            "training": {**training, "export_seconds": round(export_s[0], 1),
                         "export_cpu_seconds": round(export_s[1], 1), "embed_seconds": round(embed_s[0], 1),
                         "embed_cpu_seconds": round(embed_s[1], 1)},
        }
        manifest["sizes"] = artefact.size_of(folder)
        tune(folder, manifest, onts, report)
        artefact.write_json(folder / artefact.MANIFEST, manifest)
        final = artefact.publish(data_dir, folder, version)
        manifest["sizes"] = artefact.size_of(final)
        artefact.write_json(final / artefact.MANIFEST, manifest)
        return manifest
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def tune(folder: Path, manifest: dict[str, Any], onts: dict[str, Ontology], report: Reporter | None = None) -> None:
    """Choose each ontology's fusion weight on its dev terms (strict hybrid top-1 + top-5 over
    :data:`.holdout.WEIGHTS`) and set it in ``manifest``, so the version serves a tuned weight from its first
    search; an ontology with too few dev queries (tuning.MIN_QUERIES) keeps the default. Its time goes in the
    manifest's training record."""
    from search.ontology.encoder import fusion, holdout, tuning

    t0, c0 = time.perf_counter(), time.process_time()
    (report or _Silent()).stage("choosing the fusion weights on the dev terms")
    with tempfile.TemporaryDirectory(prefix="flysift-tune-") as work:
        rows = holdout.weight_sweep(folder, manifest, onts, Path(work))
    tuning.apply(manifest, tuning.choose_weights(rows, fusion.DEFAULT_WEIGHT))
    manifest["training"].update(tune_seconds=round(time.perf_counter() - t0, 1),
                                tune_cpu_seconds=round(time.process_time() - c0, 1))


def heldout_metrics(table: LabelTable, parts: list[str], vectors: np.ndarray, which: str = "test",
                    chunk: int = 256) -> dict[str, Any]:
    """The encoder alone on the held-out terms ``which``: each synonym of such a term is a query, its term the
    answer. ``strict``: every held-out term of the split has lost all its synonyms (its name remains);
    ``loo``: only the queried synonym is gone. Top-1 and top-5 over terms (each term ranked by its best label)."""
    held = {t for t, p in enumerate(parts) if p == which}
    queries = [r for t in sorted(held) for r in table.labels_of[t][1:]]
    out: dict[str, Any] = {"queries": len(queries), "terms": sum(1 for t in held if len(table.labels_of[t]) > 1)}
    if not queries:
        return out
    term = np.asarray(table.term, dtype=np.int64)
    is_held_syn = np.zeros(len(table.texts), dtype=bool)
    is_held_syn[[r for t in held for r in table.labels_of[t][1:]]] = True
    for reading in ("strict", "loo"):
        top1 = top5 = 0
        for s in range(0, len(queries), chunk):
            q = np.asarray(queries[s:s + chunk])
            sims = vectors[q] @ vectors.T
            if reading == "strict":
                sims[:, is_held_syn] = -np.inf
            else:
                sims[np.arange(len(q)), q] = -np.inf
            depth = min(sims.shape[1], 64)
            top = np.argpartition(-sims, depth - 1, axis=1)[:, :depth]
            for i, row in enumerate(top):
                row = row[np.argsort(-sims[i, row], kind="stable")]
                ranked = list(dict.fromkeys(term[row].tolist()))[:5]
                want = term[q[i]]
                top1 += bool(ranked) and ranked[0] == want
                top5 += want in ranked
        out[reading] = {"top1": round(top1 / len(queries), 4), "top5": round(top5 / len(queries), 4)}
    return out

