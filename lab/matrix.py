"""Detection over a matrix of fleets (issue 24): sampling interval x healthy-part noise, from the simulator.

Cells: sampling ``15s``, ``60s``, ``300s`` (5-minute downsampled storage: on the clock's grid) and ``mixed``
(accelerators every 15 s, ports every 5 minutes), each with jitter and 1 % of scrapes lost where a live scrape
would have them, and on request ``10s``, ``300s-live`` (5-minute scrapes with jitter and lost scrapes), ``15s-60s``
and ``60s-5m`` (accelerators every 15 s and ports every minute; accelerators every minute and ports every 5 minutes:
the mixes of issue 53's measure on telemetry this project did not make); noise
``quiet`` (this project's simulator before issue 24), ``realistic`` and ``noisy``
(lab/sim/noise.py), and on request ``bursty`` (``realistic`` with a touched cable now and then: issue 53's
bursts over a limit's hourly count on healthy parts) and ``loaded`` (``noisy`` whose errors come with use; its quiet
weeks are ``quiet-7d-half-idle``'s fleet, idle half the time between jobs). In each cell: dense traces (every fault
class twice, ``dense-template-a`` and ``-b`` alternating by seed, the full and stock exporter profiles alternating by
pairs of seeds) and quiet weeks (``quiet-7d``: no faults, everyday confounders) for the false-flag rate. Every run is
scored for raswarden (the rules and statistical detectors, plus a model's learned ones) and for the static-threshold
baseline,
straight from the simulator through the pipeline (:func:`lab.evaluate.evaluate_simulation`: the batches a
replay of the trace would make, without writing hundreds of gigabytes of traces).

A fleet other than the default (``--fleet``) runs the same scenarios on other hardware: ``gb200`` is nine GB200
NVL72 racks (648 Blackwell GPUs in 162 trays of 4, a port per GPU: lab/sim/layout.py), whose exporters publish
NVLink 5's counters where the H100 rack's publish NVLink CRC errors and whose driver prints NVLink 5's Xid 149 for
an NVLink error (lab/sim/vendors.py), so the matrix measures the readings and rules a Blackwell fleet needs.

A dense run may begin with ``warmup_s`` of the same fleet without faults (``--warmup 24h``): the faults, and
every confounder that starts later than the first instant, move that much later; a condition present from the start
(a warm slot) stays so. Without it, a fault begins 1 to 10 hours after raswarden starts watching, which no fleet's
daemon sees: the trend detector's longer windows are judged only against that much of a part's own record.

Runs are appended to a results file as they finish and skipped when already there, so a long matrix can be run
in pieces. ``raswarden evaluate --matrix`` and ``bench/matrix.py`` run it; :func:`report` prints the table.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from lab.bundled import FAULTS, SCENARIOS
LIVE = {"jitter": "1s", "missed": 0.01}
# cell -> (the simulator's resolution in seconds, the sampling per source); CELLS are issue 24's, the default
SAMPLING = {
    "10s": (10.0, {"dcgm": {"interval": "10s", **LIVE}, "node": {"interval": "10s", **LIVE}}),
    "15s": (15.0, {"dcgm": {"interval": "15s", **LIVE}, "node": {"interval": "15s", **LIVE}}),
    "60s": (30.0, {"dcgm": {"interval": "60s", **LIVE}, "node": {"interval": "60s", **LIVE}}),
    "300s": (60.0, {"dcgm": {"interval": "5m", "aligned": True}, "node": {"interval": "5m", "aligned": True}}),
    "mixed": (15.0, {"dcgm": {"interval": "15s", **LIVE}, "node": {"interval": "5m", **LIVE}}),
    # 5-minute scrapes as a live Prometheus makes them (jitter, lost scrapes), not downsampled onto the clock's grid
    "300s-live": (60.0, {"dcgm": {"interval": "5m", **LIVE}, "node": {"interval": "5m", **LIVE}}),
    # the two mixes issue 53's outside measure used beside 5 minutes throughout: DCGM at 15 s with node_exporter's
    # port counters at 60 s, and DCGM at 60 s with them at 5 minutes
    "15s-60s": (15.0, {"dcgm": {"interval": "15s", **LIVE}, "node": {"interval": "60s", **LIVE}}),
    "60s-5m": (30.0, {"dcgm": {"interval": "60s", **LIVE}, "node": {"interval": "5m", **LIVE}}),
}
CELLS = ("15s", "60s", "300s", "mixed")
NOISE = ("quiet", "realistic", "noisy", "bursty", "loaded")
QUIET_WEEK = {"loaded": "quiet-7d-half-idle"}
"""A noise cell's quiet weeks where not quiet-7d's busy fleet: errors that follow use are tested where use changes."""
#: the cells of issue 24's matrix; ``bursty`` (rare bursts over a limit's hourly count, issue 53) is run when named
DEFAULT_NOISE = NOISE[:3]
FLEETS = {"scalex640": None, "gb200": {"preset": "nvl72", "accelerators": 648}}
"""The fleets a cell can run on: the scenarios' own topology (one scaleX640 rack of H100 blades), or another."""
DEFAULT_FLEET = "scalex640"


def parse_seeds(text: str) -> list[int]:
    """Seeds from "1001..1020", "1,2,3" or a mix ("1..5,9"); "" is none."""
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("..")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def scenario_for(kind: str, sampling: str, noise: str, seed: int, warmup_s: float = 0.0,
                 fleet: str = DEFAULT_FLEET) -> dict:
    """The scenario of one run: the base scenario with the cell's sampling and noise (and seed) on ``fleet``, its
    faults ``warmup_s`` later (a dense run only)."""
    import yaml

    from lab.sim.faults import parse_duration

    base = f"dense-template-{'ab'[seed % 2]}" if kind == "dense" else QUIET_WEEK.get(noise, "quiet-7d")
    d = yaml.safe_load((SCENARIOS / f"{base}.yaml").read_text())
    resolution, spec = SAMPLING[sampling]
    d.update(name=f"{base}-{sampling}-{noise}-{seed}", seed=seed, resolution=f"{resolution:g}s", sampling=spec,
             noise=noise)
    if FLEETS[fleet] is not None:
        d.update(name=f"{d['name']}-{fleet}", topology=dict(FLEETS[fleet]))
    if kind == "dense":
        d["profile"] = "full" if (seed // 2) % 2 == 0 else "stock"
        if warmup_s > 0:
            d["name"] += f"-warm{warmup_s:g}s"
            d["duration"] = f"{parse_duration(d['duration'], 'duration') + warmup_s:g}s"
            for f in d.get("faults", []):
                for field in ("onset", "failure"):
                    at = f.get(field)
                    if at is None or (field == "onset" and parse_duration(at, field) == 0):
                        continue  # a condition present from the start stays so
                    f[field] = f"{parse_duration(at, field) + warmup_s:g}s"
    return d


def run_one(kind: str, sampling: str, noise: str, seed: int, model: str | None, warmup_s: float = 0.0,
            baseline: bool = True, fleet: str = DEFAULT_FLEET, findings_out: list[list[dict]] | None = None) -> dict:
    """One run of the matrix, scored for raswarden and (unless not ``baseline``: its ``baseline`` is None then) for
    the baseline; on a fleet other than the default its record names it. ``findings_out``: as
    :func:`lab.evaluate.evaluate_simulation_judges` takes it."""
    from lab.evaluate import evaluate_simulation_judges
    from lab.sim.simulator import Simulator
    from lab.sim.faults import load_library
    from lab.sim.scenario import Scenario
    from detectors.bundle import ModelBundle

    d = scenario_for(kind, sampling, noise, seed, warmup_s if kind == "dense" else 0.0, fleet)
    library = load_library(FAULTS)
    started = time.perf_counter()
    bundle = ModelBundle.load(Path(model)) if model else None
    # one simulation, judged by raswarden and (beside it, from the same batches) by the baseline
    judged = evaluate_simulation_judges(Simulator(Scenario.from_dict(d, d["name"]), library),
                                        [(False, bundle)] + ([(True, None)] if baseline else []),
                                        findings_out=findings_out)
    ours, base = judged[0], (judged[1] if baseline else None)
    return {"kind": kind, "sampling": sampling, "noise": noise, "seed": seed, "profile": d.get("profile", "full"),
            "model": model, "warmup_s": warmup_s if kind == "dense" else 0.0, "raswarden": raw(ours),
            "baseline": raw(base) if base is not None else None,
            "wall_s": round(time.perf_counter() - started, 1)} | ({"fleet": fleet} if fleet != DEFAULT_FLEET else {})


def raw(ev) -> dict:
    """What pooling runs needs of an evaluation: counts and the lists behind the medians, per class."""
    classes = {name: {"faults": c.faults, "flagged": c.flagged_before_failure, "leads_s": c.lead_times_s,
                      "hard": c.hard_faults, "in_time": c.failed_in_time, "latencies_s": c.hard_latencies_s}
               for name, c in ev.by_class.items()}
    return {"classes": classes, "windows_s": ev.onset_to_failure_s, "false_flags": ev.false_flags,
            "confounder_flags": ev.confounder_flags, "node_days": ev.node_days,
            "false_flag_list": [f.as_dict() for f in ev.false_flag_list], "findings_digest": ev.findings_digest,
            "fault_leads": ev.fault_leads}


def fleet_label(r: dict) -> str:
    """A run's fleet as its lines name it: "" on the default fleet, else its name and a space."""
    return f"{r['fleet']} " if r.get("fleet", DEFAULT_FLEET) != DEFAULT_FLEET else ""


def key(r: dict) -> tuple:
    return (r["kind"], r["sampling"], r["noise"], r["seed"], r.get("model"), r.get("warmup_s", 0.0),
            r.get("fleet", DEFAULT_FLEET))


def pooled(runs: list[dict], who: str) -> dict:
    """Pooled figures of runs (docs/architecture.md §5) and their spread over seeds (of the runs scored for ``who``:
    a run made without the baseline has none)."""
    runs = [r for r in runs if r.get(who) is not None]
    faults = flagged = hard = in_time = 0
    leads, windows, latencies, per_seed_recall = [], [], [], []
    false = conf = 0
    node_days = 0.0
    for r in runs:
        ev = r[who]
        classes = ev["classes"].values()
        n = sum(c["faults"] for c in classes)
        hit = sum(c["flagged"] for c in classes)
        faults += n
        flagged += hit
        hard += sum(c["hard"] for c in classes)
        in_time += sum(c["in_time"] for c in classes)
        leads += [x for c in classes for x in c["leads_s"]]
        latencies += [x for c in classes for x in c["latencies_s"]]
        windows += ev["windows_s"]
        false += ev["false_flags"]
        conf += ev["confounder_flags"]
        node_days += ev["node_days"]
        if n:
            per_seed_recall.append(hit / n)
    median_lead = statistics.median(leads) if leads else None
    median_window = statistics.median(windows) if windows else None
    return {
        "runs": len(runs), "faults": faults, "recall": flagged / faults if faults else None,
        "recall_per_seed_min": min(per_seed_recall) if per_seed_recall else None,
        "median_lead_h": median_lead / 3600 if median_lead else None,
        "lead_share_of_window": (median_lead / median_window) if median_lead and median_window else None,
        "hard_faults": hard, "hard_failed_in_time": in_time,
        "hard_latency_max_s": max(latencies) if latencies else None, "node_days": round(node_days, 1),
        "false_flags": false, "false_per_1000_node_days": 1000 * false / node_days if node_days else None,
        "confounder_flags": conf,
    }


def report(results: dict) -> str:
    """The table per cell (raswarden and baseline): recall, lead, hard faults in time, false flags."""
    runs = results["runs"]
    lines = [f"{'cell':16} {'':10} {'recall':>7} {'min':>5} {'lead h':>7} {'lead/win':>8} {'hard ok':>9} "
             f"{'node-days':>9} {'false':>6} {'/1000':>6} {'conf':>5}"]

    def f(x, fmt):
        return "-" if x is None else format(x, fmt)

    warmups = sorted({r.get("warmup_s", 0.0) for r in runs if r["kind"] == "dense"}) or [0.0]
    for fleet, sampling, noise, warm in ((fl, s, n, w) for fl in FLEETS for s in SAMPLING for n in NOISE
                                         for w in warmups):
        # a cell's dense runs of one warm-up, with its quiet weeks (which have none)
        cell = [r for r in runs if r["sampling"] == sampling and r["noise"] == noise
                and r.get("fleet", DEFAULT_FLEET) == fleet
                and (r["kind"] == "quiet" or r.get("warmup_s", 0.0) == warm)]
        if not cell:
            continue
        name = fleet_label({"fleet": fleet}) + f"{sampling}/{noise}" + (
            f" +{warm / 3600:g}h" if warm else "")
        for who in ("raswarden", "baseline"):
            dense = pooled([r for r in cell if r["kind"] == "dense"], who)
            quiet = pooled([r for r in cell if r["kind"] == "quiet"], who)
            allp = pooled(cell, who)
            if not allp["runs"]:
                continue  # run without the baseline
            lines.append(
                f"{name:16} {who:10} {f(dense['recall'], '.3f'):>7} "
                f"{f(dense['recall_per_seed_min'], '.2f'):>5} {f(dense['median_lead_h'], '.2f'):>7} "
                f"{f(dense['lead_share_of_window'], '.3f'):>8} "
                f"{dense['hard_failed_in_time']:>4}/{dense['hard_faults']:<4} {allp['node_days']:>9} "
                f"{allp['false_flags']:>6} {f(allp['false_per_1000_node_days'], '.2f'):>6} "
                f"{allp['confounder_flags']:>5}   ({dense['runs']} dense, {quiet['runs']} quiet)")
    return "\n".join(lines)


_NOT_IN_OLDER_RUNS = ("findings_digest", "fault_leads")
"""What a run records that older records lack: compared where both carry it."""


def at_median(results: dict, around: int = 3) -> str:
    """Per cell of dense runs (as :func:`report` groups them, raswarden's figures), the faults whose leads stand on
    either side of its median lead, ``around`` each way: class, template, exporter profile, seed, window and lead.
    A cell's median moves only when these do; runs recorded before faults' leads were kept are left out."""
    runs = [r for r in results["runs"] if r["kind"] == "dense" and "fault_leads" in (r.get("raswarden") or {})]
    cells: dict[str, list[tuple]] = {}  # a cell's name -> (lead, window, class, template, profile, seed)
    for r in runs:
        name = fleet_label(r) + f"{r['sampling']}/{r['noise']}" + (
            f" +{r['warmup_s'] / 3600:g}h" if r.get("warmup_s") else "")
        for f in r["raswarden"]["fault_leads"]:
            if f["lead_s"] is not None:
                cells.setdefault(name, []).append((f["lead_s"], f["window_s"], f["fault"], f["template"],
                                                   r.get("profile", ""), r["seed"]))
    lines = []
    for name in sorted(cells):
        leads = sorted(cells[name])
        m = len(leads) // 2
        median = statistics.median(x[0] for x in leads)
        lines.append(f"{name}: median lead {median / 3600:.2f} h of {len(leads)} leads")
        for i in range(max(0, m - around), min(len(leads), m + around)):
            lead, window, fault, template, profile, seed = leads[i]
            lines.append(f"  {lead / 3600:5.2f} h of {window / 3600:4.1f} h ({lead / window:.2f})  {fault} "
                         f"{template} {profile} seed {seed}")
    return "\n".join(lines)


def differences(a: dict, b: dict) -> tuple[int, list[str]]:
    """Runs of two results files compared where both have them (wall time aside): how many, and what differs in
    each that does (its findings digest first, where both carry one). A change meant to move nothing moves none."""
    mine = {key(r): r for r in b["runs"]}
    compared, out = 0, []
    for r in a["runs"]:
        other = mine.get(key(r))
        if other is None:
            continue
        compared += 1
        for who in ("raswarden", "baseline"):
            x, y = r.get(who), other.get(who)
            if x is None or y is None:
                continue
            what = [k for k in sorted(set(x) | set(y)) if x.get(k) != y.get(k)
                    and not (k in _NOT_IN_OLDER_RUNS and (x.get(k) in (None, "") or y.get(k) in (None, "")))]
            if what:
                out.append(f"{r['kind']} {fleet_label(r)}{r['sampling']}/{r['noise']} seed {r['seed']} ({who}): "
                           f"{', '.join(what)}")
    return compared, out


def write_results(path: Path, results: dict) -> None:
    """Write the results whole or not at all (a run cut off mid-write leaves the previous file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(results, indent=2))
    os.replace(tmp, path)


def check_cells(sampling: list[str], noise: list[str], fleet: str = DEFAULT_FLEET) -> None:
    """ValueError naming a sampling or noise cell or a fleet the matrix does not have."""
    if fleet not in FLEETS:
        raise ValueError(f"unknown fleet {fleet!r} (one of {', '.join(FLEETS)})")
    for name in sampling:
        if name not in SAMPLING:
            raise ValueError(f"unknown sampling cell {name!r} (one of {', '.join(SAMPLING)})")
    for name in noise:
        if name not in NOISE:
            raise ValueError(f"unknown noise cell {name!r} (one of {', '.join(NOISE)})")


def run_matrix(sampling: list[str], noise: list[str], dense_seeds: list[int], quiet_seeds: list[int],
               out: Path, jobs: int = 1, model: str | None = None,
               progress: Callable[[dict], None] | None = None, warmup_s: float = 0.0,
               baseline: bool = True, runner: Callable[..., dict] | None = None,
               fleet: str = DEFAULT_FLEET) -> dict:
    """Run the cells' runs not yet in ``out`` (seed-major: a matrix stopped part-way holds as many seeds in every
    cell), appending each to ``out`` as it finishes; returns the results. Without ``baseline`` the static-threshold
    baseline is not run (its code is unchanged between runs of raswarden; a quarter of a run, which shares the
    simulation with it). ``runner`` makes one run in place of :func:`run_one` (same arguments and record; a bench's
    variant, picklable for ``jobs`` > 1; given ``fleet`` only when it is not the default)."""
    runner = runner or run_one
    check_cells(sampling, noise, fleet)
    extra = {"fleet": fleet} if fleet != DEFAULT_FLEET else {}
    results = json.loads(out.read_text()) if out.exists() else {"runs": []}
    done = {key(r) for r in results["runs"]}
    todo = [(kind, s, n, seed) for s in sampling for n in noise
            for kind, group in (("dense", dense_seeds), ("quiet", quiet_seeds)) for seed in group
            if (kind, s, n, seed, model, warmup_s if kind == "dense" else 0.0, fleet) not in done]
    todo.sort(key=lambda t: (t[0] != "dense", t[3]))
    if jobs <= 1:
        for t in todo:
            _done(runner(*t, model, warmup_s, baseline, **extra), results, out, progress)
        return results
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        for fut in as_completed([pool.submit(runner, *t, model, warmup_s, baseline, **extra) for t in todo]):
            _done(fut.result(), results, out, progress)
    return results


def _done(r: dict, results: dict, out: Path, progress) -> None:
    results["runs"].append(r)
    write_results(out, results)
    if progress is not None:
        progress(r)
