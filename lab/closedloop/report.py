"""The closed loop's report: its results as markdown tables, policies side by side, per seed and per fault
(``raswarden simulate --closed-loop`` and ``bench/closedloop.py`` print them; the loop is ``lab/closedloop/``).
"""

from __future__ import annotations

import statistics

from scipy import stats

from lab.closedloop.options import POLICIES
from lab.closedloop.outcome import LoopResult


ROWS = (("net loss (GPU-h)", lambda r: r.gpu_hours["net_loss"]),
        ("lost to failures", lambda r: r.gpu_hours["lost_to_failures"]),
        ("checkpoints raswarden asked for", lambda r: r.gpu_hours["checkpoints_requested"]),
        ("restarts", lambda r: r.gpu_hours["restarts"]),
        ("idle on drained nodes", lambda r: r.gpu_hours["idle_drained"]),
        ("held back by slow GPUs", lambda r: r.gpu_hours["slowed"]),
        ("periodic checkpoints (the jobs' own schedule)", lambda r: r.gpu_hours["periodic_checkpoints"]),
        ("net loss with periodic checkpoints", lambda r: r.gpu_hours["net_loss_with_periodic_checkpoints"]),
        ("effective training time ratio", lambda r: r.gpu_hours["effective_training_ratio"]),
        ("node-hours out of service (drained, down, validating)", lambda r: r.node_hours.get("out_of_service")),
        ("node-hours of broken hardware in service", lambda r: r.node_hours.get("broken_in_service")),
        ("drains true / false", None),
        ("false drains per 1,000 node-days", lambda r: r.false_drains_per_1000_node_days),
        ("hard faults acted on before failure", None),
        ("first symptom to action, median", None))


def _spread(values: list[float | None], fmt: str) -> str:
    values = [v for v in values if v is not None]  # (figures that results of an earlier version lack)
    if not values:
        return "-"
    mean = statistics.fmean(values)
    if len(values) == 1:
        return format(mean, fmt)
    return f"{format(mean, fmt)} ± {format(statistics.stdev(values), fmt)}"


def table(results: list[LoopResult]) -> str:
    """A markdown table, policies side by side: means with their standard deviation across seeds."""
    policies = [p for p in POLICIES if any(r.policy == p for r in results)]
    by = {p: [r for r in results if r.policy == p] for p in policies}
    seeds = len({(r.scenario, r.seed) for r in results})
    lines = [f"| {seeds} run(s) | " + " | ".join(policies) + " |", "|---|" + "---|" * len(policies)]
    for name, get in ROWS:
        cells = []
        for p in policies:
            rs = by[p]
            if name.startswith("drains"):
                cells.append(f"{sum(r.drains_true for r in rs)} / {sum(r.drains_false for r in rs)}")
            elif name.startswith("hard faults"):
                cells.append(f"{sum(r.acted_before_failure for r in rs)} / {sum(r.hard_faults for r in rs)}")
            elif name.startswith("first symptom"):
                s2a = [x for r in rs for x in r.symptom_to_action_s]
                cells.append(f"{statistics.median(s2a) / 3600:.2f} h" if s2a else "-")
            else:
                cells.append(_spread([get(r) for r in rs], ".3f" if "ratio" in name else ".1f"))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if any(r.repairs for r in results):  # the repair loop (LoopOptions.repair_orders, bad_repair_share)
        def total(rs, key):
            return sum(r.repairs.get(key) or 0 for r in rs)

        def mttr(rs):
            values = [r.repairs["mttr_h"] for r in rs if r.repairs.get("mttr_h") is not None]
            return f"{statistics.median(values):.2f} h" if values else "-"

        for name, cell in (("repair orders closed / opened", lambda rs: f"{total(rs, 'closed')} / "
                                                                        f"{total(rs, 'orders')}"),
                           ("median time to repair (order to back in service)", mttr),
                           ("botched repairs caught by validation", lambda rs: str(total(rs, "validation_catches"))),
                           ("botched repairs returned to service", lambda rs: str(total(rs, "returned_broken")))):
            lines.append(f"| {name} | " + " | ".join(cell(by[p]) for p in policies) + " |")
    if "full" in by and "reactive" in by:
        pairs = {(r.scenario, r.seed): r for r in by["reactive"]}
        for name, key in (("full's net loss / reactive's", "net_loss"),
                          ("the same with periodic checkpoints", "net_loss_with_periodic_checkpoints")):
            ratios = [r.gpu_hours[key] / base.gpu_hours[key] for r in by["full"]
                      if (base := pairs.get((r.scenario, r.seed))) is not None and base.gpu_hours[key]]
            if ratios:
                lines.append(f"| {name} | " + " | ".join(
                    _spread(ratios, ".2f") if p == "full" else "" for p in policies) + " |")
    return "\n".join(lines)


def per_seed_table(results: list[LoopResult]) -> str:
    """A markdown table, one row per seed: each policy's net loss, full's ratio to reactive's, and what full
    did there (drains, hard faults drained ahead of failure, idle on drained nodes): the seeds to read first."""
    policies = [p for p in POLICIES if any(r.policy == p for r in results)]
    by = {(r.scenario, r.seed, r.policy): r for r in results}
    lines = ["| seed | hard faults (failed under none) | " + " | ".join(f"{p} net loss" for p in policies)
             + " | full / reactive | full: drains true / false, acted ahead, idle on drained |",
             "|---|---|" + "---|" * len(policies) + "---|---|"]
    for scenario, seed in sorted({(r.scenario, r.seed) for r in results}):
        row = {p: by.get((scenario, seed, p)) for p in policies}
        any_run = next(r for r in row.values() if r is not None)
        failed = f" ({row['none'].failed})" if row.get("none") is not None else ""
        cells = [f"{r.gpu_hours['net_loss']:.0f}" if r is not None else "-" for r in row.values()]
        full, reactive = row.get("full"), row.get("reactive")
        ratio = (f"{full.gpu_hours['net_loss'] / reactive.gpu_hours['net_loss']:.2f}"
                 if full is not None and reactive is not None and reactive.gpu_hours["net_loss"] else "")
        did = (f"{full.drains_true} / {full.drains_false}, {full.acted_before_failure} / {full.hard_faults}, "
               f"{full.gpu_hours['idle_drained']:.0f}" if full is not None else "")
        lines.append(f"| {seed} | {any_run.hard_faults}{failed} | " + " | ".join(cells) + f" | {ratio} | {did} |")
    return "\n".join(lines)


def _outcome_cell(o: dict) -> str:
    drained = f"drained +{o['first_drain_h']:.2f} h" if o["first_drain_h"] is not None else ""
    if o["repaired_early"]:  # without a drain of its own: it began on a node already drained or under repair
        return f"repaired ahead ({drained or 'its node already out'})"
    if not o["failed"]:
        return drained or "-"
    if o.get("under_repair"):
        return "failed while out for repair"
    why = [drained] if o.get("drained") else []
    if o.get("job") and o.get("job_opted_in") is False:
        why.append("job not opted in")
    lost = f"{o['lost_gpu_h']:.0f} GPU-h" if o.get("job") else "no job"
    return "failed, " + ", ".join(why + [lost])


def fault_table(results: list[LoopResult]) -> str:
    """A markdown table for one seed, a row per fault and a column per policy: repaired ahead of its failure
    (and when raswarden drained the node), or failed and what that cost."""
    policies = [p for p in POLICIES if any(r.policy == p for r in results)]
    by = {r.policy: r for r in results}
    first = by[policies[0]]
    lines = ["| fault | entity | onset (h) | window (h) | " + " | ".join(policies) + " |",
             "|---|---|---|---|" + "---|" * len(policies)]
    for i, o in enumerate(first.fault_outcomes):
        window = f"{o['failure_h'] - o['onset_h']:.2f}" if o["failure_h"] is not None else "-"
        cells = [_outcome_cell(by[p].fault_outcomes[i]) if i < len(by[p].fault_outcomes) else "?" for p in policies]
        lines.append(f"| {o['fault']} | {o['entity']} | {o['onset_h']:.1f} | {window} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


COMPARED = (("net loss (GPU-h)", lambda r: r.gpu_hours["net_loss"]),
            ("lost to failures (GPU-h)", lambda r: r.gpu_hours["lost_to_failures"]),
            ("restarts (GPU-h)", lambda r: r.gpu_hours["restarts"]),
            ("node-hours out of service", lambda r: r.node_hours.get("out_of_service")),
            ("node-hours of broken hardware in service", lambda r: r.node_hours.get("broken_in_service")),
            ("botched repairs", lambda r: r.repairs.get("botched")),
            ("botched repairs caught by validation", lambda r: r.repairs.get("validation_catches")),
            ("botched repairs returned to service", lambda r: r.repairs.get("returned_broken")),
            ("hard faults whose part was replaced before failure", lambda r: r.acted_before_failure),
            ("hard faults", lambda r: r.hard_faults))


def comparison_table(first: list[LoopResult], second: list[LoopResult], names: tuple[str, str]) -> str:
    """Two sets of runs of one policy side by side, on the seeds both have (with and without raswarden's
    validation, say): per figure, the mean and standard deviation across those seeds, and the mean of the seeds'
    differences (second less first)."""
    a = {(r.scenario, r.seed, r.policy): r for r in first}
    b = {(r.scenario, r.seed, r.policy): r for r in second}
    both = sorted(set(a) & set(b))
    lines = [f"| {len(both)} seed(s) | {names[0]} | {names[1]} | difference |", "|---|---|---|---|"]
    for name, get in COMPARED:
        x, y = [get(a[k]) for k in both], [get(b[k]) for k in both]
        diffs = [v - u for u, v in zip(x, y) if u is not None and v is not None]
        lines.append(f"| {name} | {_spread(x, '.1f')} | {_spread(y, '.1f')} | "
                     f"{format(statistics.fmean(diffs), '+.1f') if diffs else '-'} |")
    return "\n".join(lines)


def _failures_with_a_job(r: LoopResult) -> list[dict]:
    return [o for o in r.fault_outcomes if o.get("failed") and o.get("job") and o.get("job_interval_h") is not None]


CHECKPOINT_ROWS = (
    ("effective training time ratio", ".4f", lambda r: r.gpu_hours["productive"] / r.gpu_hours["allocated"]),
    ("GPU-h lost to failures", ".0f", lambda r: r.gpu_hours["lost_to_failures"]),
    ("GPU-h of periodic checkpoints", ".0f", lambda r: r.gpu_hours["periodic_checkpoints"]),
    ("GPU-h of checkpoints raswarden asked for", ".0f", lambda r: r.gpu_hours["checkpoints_requested"]),
    ("GPU-h of restarts", ".0f", lambda r: r.gpu_hours["restarts"]),
    ("GPU-h idle on drained nodes, held back by slow GPUs", ".0f",
     lambda r: r.gpu_hours["idle_drained"] + r.gpu_hours["slowed"]),
    ("periodic checkpoints", ".0f", lambda r: r.checkpoints.get("periodic")),
    ("interval they came after, median (h)", ".2f", lambda r: r.checkpoints.get("median_interval_h")),
    ("failures that struck a job", ".1f", lambda r: len(_failures_with_a_job(r))),
)


def checkpoint_table(by_policy: dict[str, list[LoopResult]]) -> str:
    """Checkpoint policies side by side (LoopOptions.checkpoint_policy; the same seeds under each): the effective
    training time ratio, the GPU-hours by cause and the intervals chosen, means with their spread across seeds; then
    the seeds' differences of the ratio between each pair of policies; then, over every failure that struck a
    running job, the work it lost (hours since the job's last checkpoint) against half the interval the job was
    using then (what that interval implies on average)."""
    names = list(by_policy)
    seeds = sorted(set.intersection(*({(r.scenario, r.seed) for r in rs} for rs in by_policy.values())))
    runs = {p: {(r.scenario, r.seed): r for r in rs} for p, rs in by_policy.items()}
    lines = [f"| {len(seeds)} seed(s) | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for name, fmt, get in CHECKPOINT_ROWS:
        lines.append(f"| {name} | " + " | ".join(_spread([get(runs[p][k]) for k in seeds], fmt) for p in names)
                     + " |")
    ratio = CHECKPOINT_ROWS[0][2]
    for i, p in enumerate(names):
        for base in names[:i]:
            diffs = [ratio(runs[p][k]) - ratio(runs[base][k]) for k in seeds]
            spread = f" ± {statistics.stdev(diffs):.4f}" if len(diffs) > 1 else ""
            lines.append(f"| ratio, {p} - {base} (higher in) | {statistics.fmean(diffs):+.4f}{spread} "
                         f"({sum(d > 0 for d in diffs)} of {len(diffs)}) |" + " |" * (len(names) - 1))
    for name, get in (("work lost per failure that struck a job (h since its checkpoint)",
                       lambda o: o.get("job_since_checkpoint_h")),
                      ("half the interval the job used then (h)", lambda o: o["job_interval_h"] / 2)):
        cells = []
        for p in names:
            values = [get(o) for k in seeds for o in _failures_with_a_job(runs[p][k]) if get(o) is not None]
            cells.append(f"{statistics.fmean(values):.2f} ({len(values)})" if values else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    cells = []
    for p in names:
        gaps = [o["job_since_checkpoint_h"] - o["job_interval_h"] / 2 for k in seeds
                for o in _failures_with_a_job(runs[p][k]) if o.get("job_since_checkpoint_h") is not None]
        cells.append(_mean_with_interval(gaps))
    lines.append("| work lost less half the interval, per failure (h; 95 % interval of the mean) | "
                 + " | ".join(cells) + " |")
    return "\n".join(lines)


def _mean_with_interval(values: list[float], level: float = 0.95) -> str:
    """The mean of ``values`` with its Student-t interval at ``level`` and how many there were; ``-`` for none."""
    if not values:
        return "-"
    mean = statistics.fmean(values)
    if len(values) < 2:
        return f"{mean:+.2f} (1)"
    half = float(stats.t.ppf((1 + level) / 2, len(values) - 1)) * statistics.stdev(values) / len(values) ** 0.5
    return f"{mean:+.2f} ({mean - half:+.2f} to {mean + half:+.2f}; {len(values)})"
