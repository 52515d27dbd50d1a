"""Draws the load curve of `baton-chaos --json` runs: devices against throughput and sync p99.

Usage: scripts/plot-load OUT.png LABEL=RUN.json [LABEL=RUN.json ...]

Each RUN.json is what `baton-chaos --json` printed for a load run alone (the other parts set to 0): its
"points" hold one measurement per number of devices. The left panel shows the server's changes per CPU-second
as a share of the one-device baseline (the issue's throughput measure; the dashed line is its 70% target); the
right panel shows sync p99 in seconds (the dotted line is the 2 s target), on a log scale.
"""

import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path, encoding="utf-8") as handle:
        report = json.load(handle)
    points = report.get("points")
    if not points:
        raise SystemExit(f"{path}: no load points (run baton-chaos --json with only the load part)")
    return points


def main(arguments):
    if len(arguments) < 2 or any("=" not in run for run in arguments[1:]):
        raise SystemExit(__doc__)
    output, runs = arguments[0], [run.split("=", 1) for run in arguments[1:]]
    figure, (throughput, latency) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, path in runs:
        points = load(path)
        devices = [point["devices"] for point in points]
        shares = [100 * (point.get("serverShareOfBaseline") or point["shareOfBaseline"]) for point in points]
        throughput.plot(devices, shares, marker="o", label=label)
        latency.plot(devices, [point["syncP99"] for point in points], marker="o", label=label)
    throughput.axhline(70, linestyle="--", color="grey", linewidth=1, label="target: at least 70%")
    throughput.set_xlabel("devices syncing")
    throughput.set_ylabel("server changes per CPU-second, % of one device")
    throughput.set_ylim(bottom=0)
    latency.axhline(2, linestyle=":", color="grey", linewidth=1, label="target: under 2 s")
    latency.set_yscale("log")
    latency.set_xlabel("devices syncing")
    latency.set_ylabel("sync p99 (s)")
    for axes in (throughput, latency):
        axes.grid(alpha=0.3)
        axes.legend(fontsize=8)
    figure.suptitle("baton-chaos load part")
    figure.tight_layout()
    figure.savefig(output, dpi=100)
    print(f"wrote {output}")


if __name__ == "__main__":
    main(sys.argv[1:])
