#!/usr/bin/env python3
"""Writes the example fleets of `loom plan` (docs/plan.md says how the numbers were chosen).

The 64-GPU fleet is HetRL's testbed: 24 A100-40GB, 24 L40S, 16 L4 in 8-GPU machines. The paper
shows its per-pair latency/bandwidth only as a figure, so pairs are derived from great-circle
distance between the regions, mapped linearly onto the stated ranges: the closest pair gets the
lowest latency and the highest bandwidth, the farthest pair the highest latency and the lowest
bandwidth. Run from the repository root: python3 examples/plan/gen.py
"""
import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
COORD = {  # latitude, longitude of the cloud regions
    "virginia": (38.9, -77.4), "ohio": (40.0, -83.0), "paris": (48.86, 2.35),
    "stockholm": (59.33, 18.07), "london": (51.5, -0.12), "ireland": (53.35, -6.26),
    "spain": (41.6, -0.9), "zurich": (47.37, 8.54), "frankfurt": (50.11, 8.68),
    "milan": (45.46, 9.19),
}
LAN = {"latency_ms": 0.02, "gbps": 100}  # between machines of one region (EFA-class)


def km(a, b):
    (la1, lo1), (la2, lo2) = COORD[a], COORD[b]
    p1, p2, dl = math.radians(la1), math.radians(la2), math.radians(lo2 - lo1)
    c = math.sin(p1) * math.sin(p2) + math.cos(p1) * math.cos(p2) * math.cos(dl)
    return 6371 * math.acos(max(-1, min(1, c)))


def pairs(regions, lat_range, bw_range):
    ds = {(a, b): km(a, b) for i, a in enumerate(regions) for b in regions[i + 1:]}
    lo, hi = min(ds.values()), max(ds.values())
    out = []
    for (a, b), d in ds.items():
        f = (d - lo) / (hi - lo) if hi > lo else 0
        out.append({"a": a, "b": b,
                    "latency_ms": round(lat_range[0] + f * (lat_range[1] - lat_range[0]), 2),
                    "gbps": round(bw_range[1] - f * (bw_range[1] - bw_range[0]), 2)})
    return out


def machines(spec):
    """spec: list of (type, region, count of 8-GPU machines)."""
    out, n = [], {}
    for typ, region, k in spec:
        for _ in range(k):
            n[typ] = n.get(typ, 0) + 1
            out.append({"type": typ, "machine": f"{region}-{typ.lower()}-{n[typ]}",
                        "region": region, "zone": f"{region}-a", "count": 8})
    return out


def write(name, doc):
    with open(os.path.join(HERE, name), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def main():
    write("s1-single-region.json", {
        "name": "S1 single region: 24 A100, 24 L40S, 16 L4",
        "devices": machines([("A100", "virginia", 3), ("L40S", "virginia", 3),
                             ("L4", "virginia", 2)]),
        "links": {"intra_region": LAN}})
    # S2: Ohio and Virginia 10 ms / 5 Gbps; the L4s are single-GPU edge sites that reach only
    # Virginia directly, at 1 Gbps; to Ohio they relay through Virginia.
    edge = [{"type": "L4", "machine": f"edge-{i}", "region": "virginia-edge",
             "zone": f"edge-{i}", "count": 1} for i in range(16)]
    write("s2-hybrid.json", {
        "name": "S2 Ohio/Virginia hybrid with 1 Gbps edge L4s",
        "devices": machines([("A100", "ohio", 2), ("L40S", "ohio", 1), ("A100", "virginia", 1),
                             ("L40S", "virginia", 2)]) + edge,
        "links": {"intra_region": LAN,
                  "regions": {"virginia-edge": {"latency_ms": 4, "gbps": 1}},
                  "pairs": [{"a": "ohio", "b": "virginia", "latency_ms": 10, "gbps": 5},
                            {"a": "virginia", "b": "virginia-edge", "latency_ms": 2, "gbps": 1},
                            {"a": "ohio", "b": "virginia-edge", "latency_ms": 12, "gbps": 1}]}})
    eu = ["paris", "stockholm", "london", "ireland", "spain", "zurich", "frankfurt", "milan"]
    types = ["A100", "A100", "A100", "L40S", "L40S", "L40S", "L4", "L4"]
    order3 = ["frankfurt", "paris", "london", "zurich", "milan", "ireland", "spain", "stockholm"]
    write("s3-multi-country.json", {
        "name": "S3 eight European regions, 5-30 ms, 1.9-5 Gbps",
        "devices": machines([(t, r, 1) for t, r in zip(types, order3)]),
        "links": {"intra_region": LAN, "pairs": pairs(eu, (5, 30), (1.9, 5.0))}})
    world = ["virginia", "ohio", "paris", "stockholm", "london", "ireland", "frankfurt", "milan"]
    order4 = ["virginia", "frankfurt", "london", "ohio", "paris", "ireland", "milan", "stockholm"]
    write("s4-multi-continent.json", {
        "name": "S4 eight regions in Europe and the US, 5-60 ms, 0.9-5 Gbps",
        "devices": machines([(t, r, 1) for t, r in zip(types, order4)]),
        "links": {"intra_region": LAN, "pairs": pairs(world, (5, 60), (0.9, 5.0))}})

    def small(spec):
        out = []
        for typ, region, name, count in spec:
            out.append({"type": typ, "machine": name, "region": region, "zone": region + "-a",
                        "count": count})
        return out
    write("small-8.json", {
        "name": "8 GPUs: 4 A100 + 4 L40S, one region",
        "devices": small([("A100", "virginia", "a100-1", 4), ("L40S", "virginia", "l40s-1", 4)]),
        "links": {"intra_region": LAN}})
    write("small-16.json", {
        "name": "16 GPUs: 8 A100 + 4 L40S + 4 L4, one region",
        "devices": small([("A100", "virginia", "a100-1", 8), ("L40S", "virginia", "l40s-1", 4),
                          ("L4", "virginia", "l4-1", 4)]),
        "links": {"intra_region": LAN}})
    write("small-12-regions.json", {
        "name": "12 GPUs in two regions: 4 A100 in Ohio, 4 L40S + 4 L4 in Virginia",
        "devices": small([("A100", "ohio", "a100-1", 4), ("L40S", "virginia", "l40s-1", 4),
                          ("L4", "virginia", "l4-1", 4)]),
        "links": {"intra_region": LAN,
                  "pairs": [{"a": "ohio", "b": "virginia", "latency_ms": 10, "gbps": 5}]}})
    write("small-24.json", {
        "name": "24 GPUs: 8 A100 + 8 L40S + 8 L4, one region",
        "devices": small([("A100", "virginia", "a100-1", 8), ("L40S", "virginia", "l40s-1", 8),
                          ("L4", "virginia", "l4-1", 8)]),
        "links": {"intra_region": LAN}})


if __name__ == "__main__":
    main()
