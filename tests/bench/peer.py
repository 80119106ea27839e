#!/usr/bin/python3
"""peer.py - `make bench PEER_MODELING=...`: vtlab's prefill against the official
implementation of Kimi-Linear (a modeling file the user supplies, e.g. transformers'
models/kimi_linear/modeling_kimi_linear.py; never vendored here), on the same checkpoint
directory, f32, batch 1, the same thread count, in interleaved rounds.

    peer.py --bench build/bench --model DIR [--modeling FILE] [--config FILE] [--T 256]
            [--threads N] [--rounds 7] [--json OUT] [--atol 1e-4] [--strict]

vtlab runs in a child process, `bench DIR --serve` (tests/bench/bench.c), which answers one
command per line on stdin; the peer runs in this process. Each round times one vtlab prefill
(wall time of vt_session_prefill inside the server) and one peer prefill (wall time of
model(input_ids)), in alternating order, with a short pause before each so that the other
side's idle OpenMP threads have stopped spinning. Both see the same T tokens (the server's
`tokens`). The per-round throughput ratio vtlab/peer is printed as min/median/max.

Before timing, the peer's logits are compared with vtlab's (the server's `logits`) and
max |delta| is printed, so a peer that computes something else (a wrong mapping of the
checkpoint's names, a different model) is visible. --strict makes a mismatch exit 1.

When the peer cannot run (no python3-torch, no modeling file, its import fails, e.g.
transformers not installed), it prints "peer: not run - REASON" and vtlab's figures alone,
and exits 0: `make bench` never fails for that.
"""
import argparse
import importlib
import importlib.util
import json
import os
import re
import struct
import subprocess
import sys
import time
import types


def blas_best_core():
    """As tests/bench/blas_core.h does for the bench: on a CPU with the AVX-512 subsets of
    OpenBLAS's SkylakeX kernels, unless VTLAB_BENCH_BLAS_KEEP is set, OPENBLAS_CORETYPE is
    SkylakeX, so that torch (Debian's links OpenBLAS) and the bench server this starts run the
    same AVX-512 kernels even where the environment pins an AVX2 core type. Must run before
    numpy or torch loads OpenBLAS."""
    if os.environ.get("VTLAB_BENCH_BLAS_KEEP"):
        return
    if os.environ.get("OPENBLAS_CORETYPE", "").lower() in ("skylakex", "cooperlake", "sapphirerapids"):
        return
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return
    if all(x in flags for x in ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")):
        if os.environ.get("OPENBLAS_CORETYPE"):
            os.environ["VTLAB_BENCH_BLAS_FALLBACK"] = os.environ["OPENBLAS_CORETYPE"] + " (from OPENBLAS_CORETYPE)"
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"


def requested_threads(argv):
    """The comparison's thread count as main()'s parser will read it (--threads N or
    --threads=N, else BENCH_THREADS, else every core), known before numpy and torch load."""
    for i, arg in enumerate(argv):
        if arg == "--threads" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--threads="):
            return arg.split("=", 1)[1]
    return os.environ.get("BENCH_THREADS", str(os.cpu_count() or 1))


# OpenMP waiting as vtlab's own (model/omp_wait.c: PASSIVE after a spin of 3000; a user's
# own setting of either is kept), so that neither side's idle threads spin on the cores the
# other needs. torch's default spin cost the stand-in 2.4x at 2 threads on the 2-core VM.
VTLAB_OMP_WAIT = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "3000"}


def peer_thread_env(argv):
    """The same threads for the peer as for vtlab. torch.set_num_threads sets only torch's own
    pool: Debian's torch calls OpenBLAS's pthreads build, which starts one thread per core
    whatever torch is told. So a "1-thread" peer ran its products on 2 cores (its torch.mm
    peak at 1 thread was the 2-thread figure), and a 2-thread one had 4 threads on 2 cores.
    OpenBLAS and libgomp read these when they load: so before numpy and torch are imported.
    load_peer() checks OpenBLAS's count after the import (blas_threads)."""
    if os.environ.get("VTLAB_TEST_PEER_THREADS_UNSET"):   # test hook: the peer mode as it was
        return
    th = requested_threads(argv)
    if th.isdigit() and int(th) > 0:
        os.environ["OPENBLAS_NUM_THREADS"] = th
        os.environ["OMP_NUM_THREADS"] = th
    if not any(k in os.environ for k in VTLAB_OMP_WAIT):
        os.environ.update(VTLAB_OMP_WAIT)


blas_best_core()
peer_thread_env(sys.argv[1:])

import numpy as np  # noqa: E402  (after blas_best_core and peer_thread_env: numpy may load OpenBLAS)


class NotRun(Exception):
    """The peer cannot run here; the message says why."""


# ----------------------------------------------------------------------------- vtlab server

class Server:
    def __init__(self, bench, model):
        self.p = subprocess.Popen([bench, model, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, bufsize=1)
        line = self.p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError("bench --serve did not start (%r)" % line)

    def cmd(self, *args):
        self.p.stdin.write(" ".join(str(a) for a in args) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line.startswith("ok"):
            raise RuntimeError("bench --serve: %s -> %s" % (" ".join(map(str, args)), line.strip() or "(no answer)"))
        return line[2:].strip()

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        self.p.wait()


# ----------------------------------------------------------------------------- checkpoint

_DT = {"F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2"), "F64": np.dtype("<f8")}


def read_safetensors(path):
    """{name: float32 ndarray} from one .safetensors file (BF16/F16/F64 widened to f32)."""
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dt = _DT.get(info["dtype"])
            if dt is None:
                raise NotRun("%s: tensor %s has dtype %s, which this reader does not handle" % (path, name, info["dtype"]))
            b, e = info["data_offsets"]
            shape = tuple(info["shape"])
            f.seek(base + b)
            a = np.fromfile(f, dtype=dt, count=(e - b) // dt.itemsize)
            if info["dtype"] == "BF16":
                a = (a.astype(np.uint32) << 16).view(np.float32)
            out[name] = a.astype(np.float32, copy=False).reshape(shape)
    return out


def load_checkpoint(model_dir):
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return read_safetensors(single)
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if not os.path.exists(index):
        raise NotRun("%s: neither model.safetensors nor model.safetensors.index.json" % model_dir)
    out = {}
    for shard in sorted(set(json.load(open(index))["weight_map"].values())):
        out.update(read_safetensors(os.path.join(model_dir, shard)))
    return out


# ----------------------------------------------------------------------------- name mapping
#
# The checkpoint (vtlab synth, like Moonshot's published one) names tensors as Moonshot's
# modeling_kimi.py does: block_sparse_moe.experts.N.w1/w2/w3, q_conv1d, f_a_proj, ... The
# transformers port has used other names in some versions (fused experts gate_up_proj
# [E, 2I, D] and down_proj [E, D, I] under mlp., a packed conv1d, forget_gate_down/up,
# beta_proj, output_gate_down/up). Each of the model's state-dict entries is looked up
# by the rules below; tensors of equal size are reshaped to the model's shape.

_ALIASES = [("forget_gate_down", "f_a_proj"), ("forget_gate_up", "f_b_proj"), ("beta_proj", "b_proj"),
            ("output_gate_down", "g_a_proj"), ("output_gate_up", "g_b_proj")]


def _candidates(name):
    """Checkpoint names that may hold the target tensor `name` (one-to-one renames)."""
    c = [name]
    for a, b in _ALIASES:
        if "." + a + "." in name:
            c.append(name.replace("." + a + ".", "." + b + "."))
    c += [n.replace(".mlp.", ".block_sparse_moe.") for n in list(c) if ".mlp." in n]
    c += [re.sub(r"\.experts\.(\d+)\.gate_proj\.", r".experts.\1.w1.", n) for n in list(c)]
    c += [re.sub(r"\.experts\.(\d+)\.up_proj\.", r".experts.\1.w3.", n) for n in list(c)]
    c += [re.sub(r"\.experts\.(\d+)\.down_proj\.", r".experts.\1.w2.", n) for n in list(c)]
    return list(dict.fromkeys(c))


def _fit(a, shape, what):
    """a reshaped to shape (equal element count), or transposed in its last two dims when that fits."""
    shape = tuple(shape)
    if a.shape == shape:
        return a
    if a.ndim >= 2 and a.shape[:-2] + a.shape[-2:][::-1] == shape:
        return np.swapaxes(a, -1, -2)
    if a.size == int(np.prod(shape, dtype=np.int64)):
        return a.reshape(shape)
    raise KeyError("%s: checkpoint shape %s does not fit the model's %s" % (what, a.shape, shape))


def map_state(ck, target):
    """target: {name: shape}. Returns ({name: ndarray}, used checkpoint names, {rule: count}, problems)."""
    out, used, rules, problems = {}, set(), {}, []

    def take(n):
        used.add(n)
        return ck[n]

    for name, shape in target.items():
        try:
            hit = next((n for n in _candidates(name) if n in ck), None)
            if hit is not None:
                out[name] = _fit(take(hit), shape, name)
                r = "same name" if hit == name else "renamed"
                rules[r] = rules.get(r, 0) + 1
                continue
            m = re.match(r"(.*)\.experts\.(gate_up_proj|down_proj)$", name)
            if m:   # fused experts: stack the checkpoint's per-expert matrices
                for pre in dict.fromkeys([m.group(1), m.group(1).replace(".mlp", ".block_sparse_moe")]):
                    E, parts = 0, []
                    while pre + ".experts.%d.w1.weight" % E in ck:
                        E += 1
                    if not E:
                        continue
                    for e in range(E):
                        p = pre + ".experts.%d." % e
                        parts.append(np.concatenate([take(p + "w1.weight"), take(p + "w3.weight")], 0)
                                     if m.group(2) == "gate_up_proj" else take(p + "w2.weight"))
                    out[name] = _fit(np.stack(parts), shape, name)
                    rules["experts stacked"] = rules.get("experts stacked", 0) + 1
                    break
                if name in out:
                    continue
            m = re.match(r"(.*)\.conv1d\.weight$", name)
            if m and m.group(1) + ".q_conv1d.weight" in ck:   # one packed conv over q, k, v
                out[name] = _fit(np.concatenate([take(m.group(1) + ".%s_conv1d.weight" % x) for x in "qkv"], 0),
                                 shape, name)
                rules["convs packed"] = rules.get("convs packed", 0) + 1
                continue
            problems.append("missing: %s %s (no checkpoint tensor maps to it)" % (name, tuple(shape)))
        except KeyError as e:
            problems.append("shape: %s" % e.args[0])
    for n in sorted(set(ck) - used):
        problems.append("unexpected: %s %s (in the checkpoint, used by no model tensor)" % (n, ck[n].shape))
    return out, used, rules, problems


# ----------------------------------------------------------------------------- the peer

def _load_file_as(modname, path):
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return mod


def import_file(path):
    """Imports a modeling/configuration file so that its relative imports resolve: by its
    dotted name when it sits in a transformers source tree, else as a module of a synthetic
    package of its directory (siblings such as .configuration_kimi resolve), else, when
    transformers is installed, inside transformers.models.kimi_linear."""
    path = os.path.abspath(path)
    parts = path[:-3].split(os.sep)
    if "transformers" in parts[:-1]:
        i = len(parts) - 1 - parts[:-1][::-1].index("transformers") - 1
        root = os.sep.join(parts[:i]) or os.sep
        if os.path.exists(os.path.join(root, "transformers", "__init__.py")):
            sys.path.insert(0, root)
            return importlib.import_module(".".join(parts[i:]))
    pkgname = "_vtpeer_%s" % re.sub(r"\W", "_", os.path.dirname(path))   # one package per directory
    if pkgname not in sys.modules:
        pkg = types.ModuleType(pkgname)
        pkg.__path__ = [os.path.dirname(path)]
        sys.modules[pkgname] = pkg
    try:
        return _load_file_as(pkgname + "." + parts[-1], path)
    except ImportError as e:
        if "relative import" not in str(e) and "beyond top-level" not in str(e):
            raise
        if importlib.util.find_spec("transformers") is None:
            raise ImportError("%s (the file imports from its package, transformers, which is not installed)" % e)
        importlib.import_module("transformers.models.kimi_linear")
        return _load_file_as("transformers.models.kimi_linear." + parts[-1], path)


def _config_class(mod):
    found = [v for k, v in vars(mod).items() if isinstance(v, type) and k.endswith("Config")
             and getattr(v, "model_type", None) == "kimi_linear"]
    named = [v for v in found if v.__name__ == "KimiLinearConfig"]
    return (named or found or [None])[0]


def build_config(ccls, raw):
    """The peer's config from the checkpoint's config.json (raw, a dict), and how it was built.
    A config_from_moonshot_json beside the class (in its module) comes first: a config class
    whose attribute_map misses Moonshot's names (num_experts, num_shared_experts) would keep
    its own defaults for them under from_dict."""
    moon = getattr(sys.modules.get(ccls.__module__), "config_from_moonshot_json", None)
    if callable(moon):
        return moon(raw), "config_from_moonshot_json"
    if hasattr(ccls, "from_dict"):
        return ccls.from_dict(raw), "%s.from_dict" % ccls.__name__
    return ccls(**raw), "%s(**config.json)" % ccls.__name__


def register_shim_buffers(model):
    """torch 1.13 has no nn.Buffer; the transformers stand-in of a prepared peer folder gives
    one that marks the tensor, and its register_marked_buffers(model) registers the marked
    attributes (the router's e_score_correction_bias) as buffers, so that they are in the state
    dict and get the checkpoint's values. A real transformers on torch >= 2.5 needs nothing."""
    reg = getattr(sys.modules.get("transformers"), "register_marked_buffers", None)
    return int(reg(model)) if callable(reg) else 0


def select_kda(mod, mode):
    """The KDA path of the peer's prefill. The official file's forward without a cache calls
    torch_chunk_kda, whose plain-torch form materialises [heads, chunks, 64, 64, d] decays;
    its torch_recurrent_kda (the token loop it uses to decode) is about 2x faster on a CPU.
    mode "recurrent" (the default, the peer's faster official path) rebinds the module's name
    torch_chunk_kda to a call of torch_recurrent_kda (the file itself is not changed); "chunk"
    leaves the file as shipped. A file without both functions runs its own path."""
    if mode not in ("recurrent", "chunk"):
        raise ValueError("PEER_KDA=%s: must be recurrent or chunk" % mode)
    chunk, rec = getattr(mod, "torch_chunk_kda", None), getattr(mod, "torch_recurrent_kda", None)
    if not (callable(chunk) and callable(rec)):
        return "the modeling file's own path (it defines no torch_chunk_kda and torch_recurrent_kda)"
    if mode == "chunk":
        return "torch_chunk_kda, as the file calls it without a cache (PEER_KDA=chunk)"

    def chunk_by_recurrence(query, key, value, g, beta, initial_state=None, output_final_state=False,
                            use_qk_l2norm_in_kernel=False, cu_seqlens=None, **_):
        if cu_seqlens is not None:
            raise RuntimeError("PEER_KDA=recurrent: packed sequences (cu_seqlens) are not supported")
        return rec(query, key, value, g=g, beta=beta, initial_state=initial_state,
                   output_final_state=output_final_state, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel)

    mod.torch_chunk_kda = chunk_by_recurrence
    return ("torch_recurrent_kda in place of torch_chunk_kda, the file's faster CPU path (PEER_KDA=chunk: "
            "as shipped)")


def load_peer(modeling, config_file, model_dir, threads):
    if not modeling:
        raise NotRun("PEER_MODELING is not set (make bench PEER_MODELING=/path/to/modeling_kimi_linear.py)")
    try:
        import torch
    except ImportError:
        raise NotRun("python3-torch is not installed (make bench PEER_MODELING=... installs it with apt)")
    if not os.path.isfile(modeling):
        raise NotRun("PEER_MODELING=%s: no such file" % modeling)
    try:
        mod = import_file(modeling)
    except Exception as e:   # the user's file: any failure is a reason not to run, never a crash
        raise NotRun("import of %s failed: %s: %s" % (modeling, type(e).__name__, e))
    cls = getattr(mod, "KimiLinearForCausalLM", None)
    if cls is None:
        raise NotRun("%s defines no KimiLinearForCausalLM" % modeling)
    where = modeling
    try:
        if config_file:
            ccls, where = _config_class(import_file(config_file)), config_file
        else:
            ccls = _config_class(mod)
            for sib in ("configuration_kimi_linear.py", "configuration_kimi.py"):
                p = os.path.join(os.path.dirname(os.path.abspath(modeling)), sib)
                if ccls is None and os.path.isfile(p):
                    ccls, where = _config_class(import_file(p)), p
    except Exception as e:
        raise NotRun("import of the config class failed: %s: %s" % (type(e).__name__, e))
    if ccls is None:
        raise NotRun("no config class with model_type \"kimi_linear\" in %s or next to it (set PEER_CONFIG=FILE)"
                     % modeling)
    raw = json.load(open(os.path.join(model_dir, "config.json")))
    try:
        cfg, how = build_config(ccls, raw)
        torch.set_num_threads(threads)
        blas, lib = blas_threads(threads)
        print("peer: threads: torch %d, OpenBLAS %s (%s); OpenMP waiting %s" % (
            torch.get_num_threads(), blas if blas is not None else "unknown", lib,
            ", ".join("%s=%s" % (k, os.environ.get(k, "unset")) for k in VTLAB_OMP_WAIT)))
        if torch.get_num_threads() != threads or (blas is not None and blas != threads):
            print("peer: WARNING: the peer does not run on %d threads as vtlab does: the ratio is confounded"
                  % threads)
            bad_threads = True
        else:
            bad_threads = False
        torch.manual_seed(0)
        model = cls(cfg)
        nbuf = register_shim_buffers(model)
        model = model.float().eval()
    except Exception as e:
        raise NotRun("building %s from %s failed: %s: %s" % (cls.__name__, ccls.__name__, type(e).__name__, e))
    try:
        kda = select_kda(mod, os.environ.get("PEER_KDA", "recurrent"))
    except ValueError as e:
        raise NotRun(str(e))
    sd = model.state_dict()
    ck = load_checkpoint(model_dir)
    mapped, used, rules, problems = map_state(ck, {k: tuple(v.shape) for k, v in sd.items()})
    res = model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in mapped.items()},
                                strict=False)
    problems += ["missing (load_state_dict): %s" % k for k in res.missing_keys if k in mapped]
    problems += ["unexpected (load_state_dict): %s" % k for k in res.unexpected_keys]
    print("peer: %s (KimiLinearForCausalLM; config class %s from %s, built by %s)" % (
        modeling, ccls.__name__, where, how))
    if nbuf:
        print("peer: %d tensors the transformers stand-in marked as buffers registered (its nn.Buffer for "
              "torch < 2.5)" % nbuf)
    print("peer: KDA: %s" % kda)
    print("peer: %d checkpoint tensors -> %d of the model's %d state-dict entries (%s); %s" % (
        len(used), len(mapped), len(sd), ", ".join("%s %d" % kv for kv in sorted(rules.items())),
        "missing: none, unexpected: none" if not problems else "%d PROBLEMS:" % len(problems)))
    for p in problems[:40]:
        print("peer:   " + p)
    if len(problems) > 40:
        print("peer:   ... and %d more" % (len(problems) - 40))
    return model, torch, bool(problems), bad_threads


def blas_threads(threads):
    """The thread count of the OpenBLAS loaded in this process, set to threads first when
    the environment did not already: (count, library), or (None, why) where there is none
    that can be asked (another BLAS)."""
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({ln.split()[-1] for ln in f if "openblas" in ln.split()[-1]})
    except OSError as e:
        return None, "/proc/self/maps: %s" % e
    for lib in libs:
        try:
            h = ctypes.CDLL(lib)
            get, put = h.openblas_get_num_threads, h.openblas_set_num_threads
        except (OSError, AttributeError):
            continue
        if get() != threads and not os.environ.get("VTLAB_TEST_PEER_THREADS_UNSET"):
            put(ctypes.c_int(threads))
        return int(get()), lib
    return None, "no OpenBLAS in this process"


def torch_mm_peak(torch, n=1024, reps=5):
    a, b = torch.rand(n, n), torch.rand(n, n)
    torch.mm(a, b)
    best = 1e30
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best / 1e9


# ----------------------------------------------------------------------------- main

def mmm(v):
    v = sorted(v)
    n = len(v)
    med = v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])
    return v[0], med, v[-1]


def serve_peer(argv):
    """`peer.py --serve-peer --model DIR --threads N`: the peer in a process of its own for
    the bench's contention table (tests/bench/contention_peer.h), on N threads (torch's and
    OpenBLAS's, set before they load), answering one command per line on stdin:
        tokens ID,ID,...   -> ok              the input of the next commands
        prefill            -> ok SECONDS      wall time of one model(input_ids), no cache
        logits PATH        -> ok              that prefill's logits, raw f32 LE [T, vocab]
        quit
    First it prints what load_peer says, each line as "info LINE", then "ready" with the
    threads read back and whether the mapping and the thread counts were clean, or
    "notrun REASON" (and exits 0) when the peer cannot run. Errors answer "err MESSAGE"."""
    import contextlib
    import io
    ap = argparse.ArgumentParser(prog="peer.py --serve-peer")
    ap.add_argument("--serve-peer", action="store_true")
    ap.add_argument("--model", required=True)
    ap.add_argument("--modeling", default=os.environ.get("PEER_MODELING", ""))
    ap.add_argument("--config", default=os.environ.get("PEER_CONFIG", ""))
    ap.add_argument("--threads", type=int, required=True)
    a = ap.parse_args(argv)

    def say(text):
        print(text, flush=True)

    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log):
            model, torch, bad_map, bad_threads = load_peer(a.modeling, a.config, a.model, a.threads)
    except NotRun as e:
        for ln in log.getvalue().splitlines():
            say("info " + ln)
        say("notrun %s" % e)
        return 0
    for ln in log.getvalue().splitlines():
        say("info " + ln)
    say("ready threads=%d map=%s thread-counts=%s" % (torch.get_num_threads(), "problems" if bad_map else "clean",
                                                      "differ" if bad_threads else "ok"))
    x = None
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        try:
            if cmd == "quit":
                break
            if cmd == "tokens":
                x = torch.tensor([[int(t) for t in arg.split(",")]], dtype=torch.long)
                say("ok")
            elif cmd in ("prefill", "logits") and x is not None:
                t0 = time.perf_counter()
                with torch.no_grad():
                    out = model(input_ids=x, use_cache=False)
                sec = time.perf_counter() - t0
                if cmd == "logits":
                    lg = out.logits if hasattr(out, "logits") else out[0]
                    lg[0].float().numpy().astype("<f4").tofile(arg)
                say("ok %.9f" % sec if cmd == "prefill" else "ok")
            else:
                say("err unknown or malformed command (or no tokens yet): %s" % line.strip()[:80])
        except Exception as e:   # the user's file: its failure is an answer, never a crash
            say("err %s: %s" % (type(e).__name__, str(e).replace("\n", " ")[:300]))
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", required=True, help="build/bench (its --serve mode is vtlab's side)")
    ap.add_argument("--model", required=True, help="checkpoint directory (config.json + safetensors)")
    ap.add_argument("--modeling", default=os.environ.get("PEER_MODELING", ""))
    ap.add_argument("--config", default=os.environ.get("PEER_CONFIG", ""))
    ap.add_argument("--T", type=int, default=256)
    ap.add_argument("--threads", type=int, default=int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1)))
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("PEER_ROUNDS", 7)))
    ap.add_argument("--json", help="write the rounds' medians as a benchmark report (for vtlab record-bench)")
    ap.add_argument("--atol", type=float, default=1e-4, help="logits agreement tolerance (max |delta|)")
    ap.add_argument("--strict", action="store_true", help="exit 1 when the logits disagree beyond --atol")
    a = ap.parse_args(argv)
    T, th = a.T, a.threads

    srv = Server(a.bench, a.model)
    try:
        peak_vt = float(srv.cmd("peak", th))
        fpt = float(srv.cmd("flops", T))
        ids = [int(x) for x in srv.cmd("tokens", T).split(",")]
        print("peer mode: %s, T=%d, batch 1, f32, %d threads, %d interleaved rounds; prefill FLOPs/token %.3f MFLOP "
              "(both sides: bench.c's count)" % (a.model, T, th, a.rounds, fpt / 1e6))
        peer = None
        rc = 0
        try:
            model, torch, bad_map, bad_threads = load_peer(a.modeling, a.config, a.model, th)
            if bad_threads and a.strict:
                rc = 1
            peer = model
        except NotRun as e:
            print("peer: not run - %s" % e)
        if peer is not None:
            x = torch.tensor([ids], dtype=torch.long)

            def run_peer():
                with torch.no_grad():
                    out = peer(input_ids=x, use_cache=False)
                return out.logits if hasattr(out, "logits") else out[0]

            try:
                lp = run_peer()[0].float().numpy()
            except Exception as e:
                print("peer: not run - its forward failed: %s: %s" % (type(e).__name__, e))
                peer = None
        if peer is not None:
            path = os.path.join(os.environ.get("TMPDIR", "/tmp"), "vtpeer-logits.%d.f32" % os.getpid())
            srv.cmd("logits", T, path)
            lv = np.fromfile(path, dtype="<f4").reshape(T, -1)
            os.unlink(path)
            if lv.shape != lp.shape:
                d = float("inf")
                print("peer: logits shape %s vs vtlab's %s" % (lp.shape, lv.shape))
            else:
                d = float(np.abs(lp - lv).max())
            ok = d <= a.atol
            print("peer: logits max |delta| vs vtlab = %.3e over T=%d x vocab %d (max |logit| %.3g): %s" % (
                d, T, lv.shape[1], float(np.abs(lv).max()),
                "agree within %g" % a.atol if ok else "MISMATCH (> %g): the peer computes something else" % a.atol))
            if not ok and a.strict:
                rc = 1
            peak_pt0 = torch_mm_peak(torch)
        # warm-up, then interleaved rounds
        srv.cmd("prefill", T, th)
        tv, tp = [], []
        for r in range(a.rounds):
            order = ("v",) if peer is None else ("v", "p") if r % 2 == 0 else ("p", "v")
            for side in order:
                time.sleep(0.1)   # let the other side's idle threads stop spinning
                if side == "v":
                    tv.append(float(srv.cmd("prefill", T, th)))
                else:
                    t0 = time.perf_counter()
                    run_peer()
                    tp.append(time.perf_counter() - t0)
        # Each peak is measured again after the rounds and the higher kept, as the bench does:
        # one burst from another tenant while a peak was measured put vtlab at 150% of it.
        peak_vt0, peak_vt1 = peak_vt, float(srv.cmd("peak", th))
        peak_vt = max(peak_vt0, peak_vt1)
        vmin, vmed, vmax = mmm(tv)
        print("vtlab: sgemm peak %.1f GFLOP/s (OpenBLAS 1024^3, %d threads, in bench --serve; before the rounds %.1f, "
              "after %.1f: the higher)" % (peak_vt, th, peak_vt0, peak_vt1))
        print("vtlab: prefill %.1f tok/s (median; min %.1f, max %.1f), %.2f GFLOP/s = %.1f%% of its sgemm peak" % (
            T / vmed, T / vmax, T / vmin, T * fpt / vmed / 1e9, 100 * T * fpt / vmed / 1e9 / peak_vt))
        if peer is not None:
            pmin, pmed, pmax = mmm(tp)
            peak_pt1 = torch_mm_peak(torch)
            peak_pt = max(peak_pt0, peak_pt1)
            print("peer:  torch.mm peak %.1f GFLOP/s (1024^3, torch.set_num_threads(%d), in this process; before the "
                  "rounds %.1f, after %.1f: the higher)" % (peak_pt, th, peak_pt0, peak_pt1))
            print("peer:  prefill %.1f tok/s (median; min %.1f, max %.1f), %.2f GFLOP/s = %.1f%% of its torch.mm peak"
                  % (T / pmed, T / pmax, T / pmin, T * fpt / pmed / 1e9, 100 * T * fpt / pmed / 1e9 / peak_pt))
            ratios = [p / v for v, p in zip(tv, tp)]
            lo, med, hi = mmm(ratios)
            print("prefill ratio vtlab/peer (tok/s, per round; > 1: vtlab faster): min %.3f median %.3f max %.3f" % (
                lo, med, hi))
            if bad_map:
                print("peer: WARNING: the checkpoint did not map cleanly onto the peer (see PROBLEMS above)")
            if bad_threads:
                print("peer: WARNING: the ratio compares different thread counts (see 'peer: threads' above)")
        if a.json:
            srv.cmd("phase", "peer-vtlab-prefill-t%d" % th, T, th, "%.9f" % vmed, "%.3f" % peak_vt)
            if peer is not None:
                srv.cmd("phase", "peer-torch-prefill-t%d" % th, T, th, "%.9f" % pmed, "%.3f" % peak_pt)
            srv.cmd("write", a.json)
            print("peer: wrote %s" % a.json)
        return rc
    finally:
        srv.close()


if __name__ == "__main__":
    sys.exit(serve_peer(sys.argv[1:]) if "--serve-peer" in sys.argv[1:] else main())
