"""Builds per second through Ray vs the local pool: ``python -m benchmarks.ray_throughput``.

Builds one batch of matmul candidates (the tiled nests of ``benchmarks.measure_throughput``,
512x512x512, 64 candidates by default) three ways on this machine, and measures them with
the local runner and with the Ray runner, printing one JSON object:

    local.built_per_s             LocalBuilder with one worker process per core
    ray.built_per_s               RayBuilder on a one-node Ray cluster started here with the
                                  same number of CPUs (build tasks anywhere in the cluster)
    ray_vs_local                  ray.built_per_s / local.built_per_s
    *.overhead_ms_per_candidate   worker-slot time not spent building, per candidate:
                                  (wall x slots - sum of the builds' own seconds) / candidates;
                                  for Ray that is the scheduling cost the cluster adds
    ray_task_round_trip_ms        median round trip of an empty Ray task (submit, run, get)
    measure.local / measure.ray   wall seconds per candidate minus the kernel's own seconds,
                                  measuring the same batch through LocalRunner and RayRunner

On one machine the cluster's build workers share the same cores as the local pool, so the
ratio cannot exceed 1: what it shows is the per-candidate cost of going through Ray, which must
stay under 20 ms for a cluster of many nodes to be worth its scheduling.  Run it alone.
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import time

from autotune.measure import LocalBuilder, LocalRunner, MeasureConfig, MeasureInput
from benchmarks.measure_throughput import candidates, matmul_workload
from tensor_ir.target import Target


def _built_per_s(builder, inputs) -> dict:
    start = time.perf_counter()
    builds = builder.build(inputs)
    wall = time.perf_counter() - start
    bad = [b.error for b in builds if not b.ok]
    if bad:
        raise RuntimeError(f"{len(bad)} builds failed, first: {bad[0]}")
    own = sum(b.build_seconds for b in builds)
    return {"wall_s": wall, "built_per_s": len(inputs) / wall,
            "build_s_per_candidate": own / len(inputs), "builds": builds}


def _runner_overhead(runner, inputs, builds) -> dict:
    start = time.perf_counter()
    results = runner.run(inputs, builds)
    wall = time.perf_counter() - start
    errors = [r.error_msg for r in results if r.is_error]
    if errors:
        raise RuntimeError(f"{len(errors)} measurements failed, first: {errors[0]}")
    kernel = sum(r.kernel_seconds for r in results)
    return {"wall_s": wall, "kernel_s": kernel,
            "overhead_ms_per_candidate": 1000 * (wall - kernel) / len(inputs)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--count", type=int, default=64)
    parser.add_argument("--measure-count", type=int, default=16)
    args = parser.parse_args(argv)

    import ray

    from autotune.measure.cluster import RayBuilder, RayRunner, node_resources

    cores = Target.current_host().num_cores
    workload = matmul_workload(args.size)
    funcs = candidates(workload, args.count)
    inputs = [MeasureInput(f, "llvm", f"matmul{args.size}", reference=workload) for f in funcs]
    out = {"benchmark": "ray_throughput", "size": args.size, "candidates": len(inputs),
           "cores": cores, "ray_version": ray.__version__}

    with LocalBuilder(max_workers=cores, timeout=120) as local:
        _built_per_s(local, inputs[:cores])  # start the workers and import LLVM in them
        done = _built_per_s(local, inputs)
        local_builds = done.pop("builds")
        done["overhead_ms_per_candidate"] = 1000 * (done["wall_s"] * cores - sum(
            b.build_seconds for b in local_builds)) / len(inputs)
        out["local"] = done

        ray.init(num_cpus=cores, resources=node_resources(), include_dashboard=False,
                 log_to_driver=False, logging_level=logging.WARNING)
        try:
            noop = ray.remote(lambda: None)
            ray.get([noop.remote() for _ in range(20)])  # workers started
            trips = []
            for _ in range(50):
                t0 = time.perf_counter()
                ray.get(noop.remote())
                trips.append(time.perf_counter() - t0)
            out["ray_task_round_trip_ms"] = 1000 * statistics.median(trips)

            with RayBuilder(address=None, max_in_flight=cores, timeout=120) as remote:
                _built_per_s(remote, inputs[:2 * cores])  # warm the Ray workers' imports
                done = _built_per_s(remote, inputs)
                ray_builds = done.pop("builds")
                done["overhead_ms_per_candidate"] = 1000 * (done["wall_s"] * cores - sum(
                    b.build_seconds for b in ray_builds)) / len(inputs)
                out["ray"] = done
                out["ray_vs_local"] = out["ray"]["built_per_s"] / out["local"]["built_per_s"]

                # The measuring side: the same candidates through both runners.
                config = MeasureConfig(repeat=3, min_repeat_ms=20)
                few = inputs[:args.measure_count]
                with LocalRunner(config) as runner:
                    runner.run(few[:1], local_builds[:1])  # reference outputs computed
                    out.setdefault("measure", {})["local"] = _runner_overhead(
                        runner, few, local_builds[:len(few)])
                with RayRunner(config, address=None) as runner:
                    runner.run(few[:1], ray_builds[:1])
                    out["measure"]["ray"] = _runner_overhead(runner, few,
                                                             ray_builds[:len(few)])
        finally:
            ray.shutdown()
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
