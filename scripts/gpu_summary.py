"""One summary of a ``scripts/gpu_bench.sh`` run: ``summary.json`` and ``summary.md`` in its folder.

``python scripts/gpu_summary.py RESULTS_DIR`` reads what the parts left there (env.txt, parts.txt,
the last line of each log, ``kernels_bench/summary.json``, ``mlr_attention_bench_*/summary.json``)
and writes every ratio, rate, time and error under one flat key each (``summary.json``), and the
same grouped by issue 46's rows as a table (``summary.md``; printed too). Ratios are speeds:
above 1, the first named is faster. It needs no JAX, so it also runs where the bench failed.
"""

from __future__ import annotations

import json
import pathlib
import sys

# summary.md's sections: (title, the prefix of their kernels_bench keys)
SECTIONS = [
    ("flash attention, bf16: TFLOP/s and Pallas / cuDNN, Pallas / XLA", "attention_"),
    ("float32 flash attention (issue 46's pathology): ms, ratios, error vs XLA HIGHEST", "f32_"),
    ("flash attention tile sweep, causal bf16 (TFLOP/s)", "flash_sweep_"),
    ("matmul, square bf16: TFLOP/s and Pallas / XLA", "matmul_"),
    ("chunkwise mLSTM, bf16: ms and Pallas / XLA chunkwise", "mlstm_"),
    ("JAX's Mosaic GPU attention (reference): TFLOP/s and / cuDNN", "mgpu_reference_"),
]


def _last_line(path: pathlib.Path) -> str:
    if not path.exists():
        return "missing"
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines[-1].strip() if lines else "empty"


def _json(path: pathlib.Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def collect(results: pathlib.Path) -> dict:
    out: dict = {"env": _last_line(results / "env.txt")}
    env_file = results / "env.txt"
    env = env_file.read_text(errors="replace") if env_file.exists() else ""
    for line in env.splitlines():
        if "Driver Version" in line or line.startswith("jax "):
            out.setdefault("env_lines", []).append(" ".join(line.split()))
    if (results / "parts.txt").exists():
        out["parts"] = (results / "parts.txt").read_text().splitlines()
    for log in ("lower", "native_tests", "contract_tests"):
        out[f"{log}_result"] = _last_line(results / f"{log}.log")
    bench = _json(results / "kernels_bench" / "summary.json")
    for key, value in bench.items():
        if key.startswith(("max_err_", "memory_slope_")) or any(
            key.startswith(prefix) for _, prefix in SECTIONS
        ):
            out[key] = value
    for path in sorted(results.glob("mlr_attention_bench_*/summary.json")):
        dtype = path.parent.name.removeprefix("mlr_attention_bench_")
        mlr = _json(path)
        baselines = mlr.get("headline", {}).get("other_baselines", {})
        for key, value in baselines.items():
            out[f"mlr_{dtype}_{key}"] = value
        for key, value in mlr.get("times_ms", {}).items():
            if "pallas" in key:
                out[f"mlr_{dtype}_{key}_ms"] = value
    return out


def table(summary: dict) -> str:
    lines = ["# GPU bench summary", ""]
    lines += [f"- {x}" for x in summary.get("env_lines", [])]
    lines += [f"- {x}" for x in summary.get("parts", [])]
    for log in ("lower", "native_tests", "contract_tests"):
        lines.append(f"- {log}: {summary.get(f'{log}_result')}")
    groups = [*SECTIONS, ("MLR attention: MLR Pallas vs flash Pallas (time ratios) and ms", "mlr_")]
    for title, prefix in groups:
        keys = [k for k in summary if k.startswith(prefix)]
        if not keys:
            continue
        lines += ["", f"## {title}", "", "| key | value |", "|---|---|"]
        for key in keys:
            value = summary[key]
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
            lines.append(f"| {key.removeprefix(prefix)} | {shown} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/gpu_summary.py RESULTS_DIR", file=sys.stderr)
        return 2
    results = pathlib.Path(argv[0])
    summary = collect(results)
    (results / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=False) + "\n")
    text = table(summary)
    (results / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
