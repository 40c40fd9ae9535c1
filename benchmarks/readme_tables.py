"""Print the README's performance tables from benchmarks/results/*.json (so the README quotes the scripts)."""

from __future__ import annotations

import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def load(name: str) -> dict | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def inference_rows() -> list[dict]:
    """Rows of the main inference run and of the ipex environment's."""
    return (load("inference") or {"rows": []})["rows"] + (load("inference_ipex") or {"rows": []})["rows"]


def backend_label(requested: str, used: set[str]) -> str:
    """The backend asked for, and what it chose (auto) when that differs."""
    return requested if used == {requested} else f"{requested} (chose {'/'.join(sorted(used))})"


def inference_table() -> str:
    rows = inference_rows()
    out = [
        "| model | backend (mode) | batch 1 | batch 16 | batch 64 | batch 256 | batch 1024 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    keys = sorted(
        {(r["model"], r["backend"], r["mode"]) for r in rows},
        key=lambda k: (["mlp", "lstm", "cnn"].index(k[0]), k[1], k[2]),
    )
    for model, backend, mode in keys:
        cells = []
        for batch in (1, 16, 64, 256, 1024):
            match = [
                r for r in rows if (r["model"], r["backend"], r["mode"], r["batch"]) == (model, backend, mode, batch)
            ]
            cells.append(
                f"{match[0]['us_per_call']:,.0f} us, x{match[0]['speedup_vs_eager']:.2f} "
                f"({match[0]['speedup_vs_torch_distributions']:.2f})"
                if match
                else "-"
            )
        label = backend if mode == "default" else f"{backend} ({mode})"
        out.append(f"| {model} | {label} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def inference_forward_table() -> str:
    """The runtime alone (forward, no sampling) against eager and a bare ONNX Runtime session, and a weight sync."""
    rows = [r for r in inference_rows() if "forward_us" in r and r["mode"] == "default"]
    batches = (1, 16, 64, 256)
    out = [
        "| model | backend | " + " | ".join(f"batch {b}" for b in batches) + " | sync ms (batch 64) |",
        "| --- | --- | " + " | ".join("---" for _ in batches) + " | --- |",
    ]
    keys = sorted({(r["model"], r["backend"]) for r in rows}, key=lambda k: (["mlp", "lstm", "cnn"].index(k[0]), k[1]))
    for model, backend in keys:
        cells, sync = [], "-"
        for batch in batches:
            match = [r for r in rows if (r["model"], r["backend"], r["batch"]) == (model, backend, batch)]
            if not match:
                cells.append("-")
                continue
            r = match[0]
            cells.append(
                f"{r['forward_us']:,.0f} us, x{r['forward_speedup_vs_eager']:.2f} [{r['forward_vs_bare_ort']:.2f}]"
            )
            if batch == 64:
                sync = f"{r['sync_ms']:.1f}"
        label = backend_label(
            backend, {r["backend_used"] for r in rows if (r["model"], r["backend"]) == (model, backend)}
        )
        out.append(f"| {model} | {label} | " + " | ".join(cells) + f" | {sync} |")
    return "\n".join(out)


def sampling_table() -> str:
    data = load("sampling")
    out = [
        "| case | backend | env alone steps/s | worker steps/s (share of env alone) | time in env / policy / "
        "bookkeeping | policy us per step |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in data["rows"] if data else []:
        out.append(
            f"| {r['case']} | {backend_label(r['backend'], {r['backend_used']})} | {r['env_alone_sps']:,.0f} | "
            f"{r['worker_sps']:,.0f} ({r['share_of_ceiling']:.0%}) | "
            f"{r['env_share']:.0%} / {r['policy_share']:.0%} / {r['bookkeeping_share']:.0%} | "
            f"{r['policy_us_per_step']:,.0f} |"
        )
    return "\n".join(out)


def learner_table() -> str:
    data = load("learner")
    out = [
        "| model | variant | first update (compile) s | steady update ms | samples/s | x eager |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in data["rows"] if data else []:
        out.append(
            f"| {r['model']} | {r['variant']} | {r['first_update_s']:.2f} | {r['update_s'] * 1e3:,.0f} | "
            f"{r['samples_per_s']:,.0f} | {r['speedup_vs_eager']:.2f} |"
        )
    return "\n".join(out)


def ppo_table() -> str:
    data = load("ppo")
    out = [
        "| worker backend | seed | env steps/s (loop) | env steps/s (from launch) | solved at s | env steps "
        "| sample ms "
        "(policy share) | learn ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in data["rows"] if data else []:
        out.append(
            f"| {r['backend']} | {r['seed']} | {r['train_sps']:,.0f} | {r['sps']:,.0f} | {r['solved_at_s']} | "
            f"{r['env_steps']:,} | "
            f"{r['sample_s'] * 1e3:.1f} ({r['policy_share_of_sampling']:.0%}) | {r['learn_s'] * 1e3:.1f} |"
        )
    return "\n".join(out)


def breakout_table() -> str:
    data = load("ppo_breakout")
    out = [
        "| worker backend | mode | distrl: env steps/s in the loop | distrl: vs eager workers | RLlib published: vs no "
        "compile |",
        "| --- | --- | --- | --- | --- |",
    ]
    if not data:
        return "\n".join(out)
    published = {(r["backend"], r["mode"]): r["speedup_pct"] for r in data["rllib_published"]}
    keys = [(r["backend"], r["mode"]) for r in data["rows"]] + [
        k for k in published if k not in {(r["backend"], r["mode"]) for r in data["rows"]}
    ]
    for backend, mode in keys:
        match = [r for r in data["rows"] if (r["backend"], r["mode"]) == (backend, mode)]
        ours = f"{match[0]['train_sps']:,.0f} | {(match[0]['speedup_vs_eager'] - 1) * 100:+.0f} %" if match else "- | -"
        theirs = f"{published[(backend, mode)]:+.0f} %" if (backend, mode) in published else "-"
        out.append(f"| {backend} | {mode} | {ours} | {theirs} |")
    return "\n".join(out)


def breakout_gpu_table() -> str:
    data = load("ppo_breakout_gpu")
    out = [
        "| worker backend | mode | env steps/s (steady) | vs eager workers | sample s / learn s per iteration | launch "
        "to first batch s | RLlib published: vs no compile |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    if not data:
        return "\n".join(out)
    published = {(r["backend"], r["mode"]): r["speedup_pct"] for r in data["rllib_published"]}
    for r in data["rows"]:
        theirs = f"{published[(r['backend'], r['mode'])]:+.0f} %" if (r["backend"], r["mode"]) in published else "-"
        out.append(
            f"| {r['backend']} | {r['mode']} | {r['steady_sps']:,.0f} | {(r['speedup_vs_eager'] - 1) * 100:+.0f} % | "
            f"{r['sample_s']:.2f} / {r['learn_s']:.2f} | "
            f"{r['startup'].get('first_batch', float('nan')):.0f} | {theirs} "
            "|"
        )
    return "\n".join(out)


def gpu_learner_e2e_table() -> str:
    data = load("ppo_breakout_gpu_learner")
    out = [
        "| GPU learner | env steps/s (steady) | x eager fp32 | learn s per iteration | sample s per iteration |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in data["rows"] if data else []:
        out.append(
            f"| {r['learner']} | {r['steady_sps']:,.0f} | {r['speedup_vs_first']:.2f} | {r['learn_s']:.2f} | "
            f"{r['sample_s']:.2f} |"
        )
    return "\n".join(out)


def peers_table() -> str:
    data = load("peers")
    out = [
        "| system | runs solved | median time to mean return 475 | median env steps | median env steps/s (from launch) "
        "|",
        "| --- | --- | --- | --- | --- |",
    ]
    for m in data["medians"].values() if data else []:
        solved = f"{m['solved_at_s']:.1f} s" if m["solved_at_s"] else "not every run"
        out.append(
            f"| {m['system']} | {m['solved_runs']}/{m['runs']} | {solved} | {int(m['env_steps']):,} | {m['sps']:,.0f} |"
        )
    if data:
        t = data["targets"]
        out.append("")
        out.append(
            f"Ray's own floor (import ray, ray.init, one task) {t['ray_floor_s']:.1f} s; distrl's launch to first "
            f"batch {t.get('distrl_first_batch_s', 0):.1f} s (median)."
        )
    return "\n".join(out)


def scale_table() -> str:
    data = load("scale")
    out = [
        "| rollout workers | driver CPU ms/iter | iteration s | batch bytes | bytes each learner fetches | env steps/s "
        "per worker (vs 1) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in data["rows"] if data else []:
        out.append(
            f"| {r['workers']} | {r['driver_cpu_ms_per_iter']:.1f} | {r['iteration_s']:.2f} | {r['batch_bytes']:,} | "
            f"{r['learner_fetch_bytes']:,} ({r['fetch_share']:.2f}) | {r['worker_sample_sps']:,.0f} "
            f"({r['sampling_efficiency']:.2f}) |"
        )
    return "\n".join(out)


def compile_check_table() -> str:
    data = load("compile_check")
    out = [
        "| model | backend | batch | max abs(compiled - eager) | allowed | error / allowed | one step behind / allowed "
        "|",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in data["rows"] if data else []:
        out.append(
            f"| {r['model']} | {r['backend']} | {r['batch']} | {r['difference']:.2g} | {r['tolerance']:.2g} | "
            f"{r['error_over_allowed']:.3f} | {r['stale_over_allowed']:,.0f} |"
        )
    return "\n".join(out)


def straggler_table() -> str:
    data = load("straggler")
    out = [
        "| pipeline | 4 fast | 4, one 10x slower | 3 fast alone | one slow / 3 fast (target >= 1 with async) | "
        "policy lag (one slow) | stale batches / steps left out (one slow) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in data["rows"] if data else []:
        out.append(
            f"| {r['pipeline']} | {r['sps 4 fast']:,.0f} | {r['sps 4, one slow']:,.0f} | {r['sps 3 fast']:,.0f} | "
            f"{r['one slow / 3 fast']:.2f} | {r['policy_lag_mean (one slow)']:.2g} | {r['stale (one slow)']} |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    for title, table in [
        ("inference", inference_table()),
        ("inference_forward", inference_forward_table()),
        ("sampling", sampling_table()),
        ("learner", learner_table()),
        ("ppo", ppo_table()),
        ("ppo_breakout", breakout_table()),
        ("ppo_breakout_gpu", breakout_gpu_table()),
        ("ppo_breakout_gpu_learner", gpu_learner_e2e_table()),
        ("peers", peers_table()),
        ("scale", scale_table()),
        ("compile_check", compile_check_table()),
        ("straggler", straggler_table()),
    ]:
        print(f"<!-- {title} -->\n{table}\n")
