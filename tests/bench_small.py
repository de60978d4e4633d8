"""A bench's small mode, run as the test suite's check that the bench still runs.

usage: python3 tests/bench_small.py NAME     (from any folder; the build is ../build)

Runs the bench NAME with --small (a few steps, the smallest config, a short
budget: the bench's whole path, its figures meaningless), then checks what a
reader of its numbers relies on: it exits 0, its last line is one JSON object,
each key path SHAPES names is there (a number unless typed otherwise), and
every number anywhere in it is finite. Values are not checked: no timing
limits in tests (the full bench, `make bench`, measures).

A key path is dotted; `*` stands for every entry of an object or a list (at
least one must be there); `:str`, `:bool`, `:list`, `:object` type its leaf.
"""
import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HLAT = os.path.join(ROOT, "build", "cli", "hlat")

# How each bench is started (default: bench/NAME --small).
COMMANDS = {
    "kernels": [os.path.join(ROOT, "build", "bench", "hlat_kernels_bench"), "--small"],
    "run_page_draw": ["node", os.path.join(ROOT, "bench", "run_page_draw.mjs"), HLAT, "--small"],
    "page_screenshots": ["node", os.path.join(ROOT, "bench", "page_screenshots.mjs"), HLAT, "--small"],
}

# The key paths each bench's last line must hold: the figures docs quote.
SHAPES = {
    "uptime": ["budget_seconds", "mean_crash_seconds", "operator_delay_seconds",
               "supervised.uptime", "supervised.training_seconds", "supervised.crashes", "supervised.restarts",
               "supervised.tokens_trained", "supervised.steps",
               "unsupervised.uptime", "unsupervised.training_seconds", "unsupervised.crashes",
               "unsupervised.restarts", "unsupervised.tokens_trained", "unsupervised.steps"],
    "train_vs_pytorch": [f"{config}.{key}" for config in ("S", "M")
                         for key in ("hlat_tokens_per_s", "torch_tokens_per_s", "ratio", "mfu",
                                     "torch_compiled_tokens_per_s", "ratio_compiled", "torch_eager_variant:str",
                                     "torch_compiled_variant:str", "torch_variants_tokens_per_s.*")] +
                        ["sgemm_peak_gflops", "torch_blas.library:str", "reference_setting.torch:str",
                         "reference_setting.torch_threads", "reference_setting.env:object",
                         "reference_setting.openblas:object", "reference_setting.cpu:object",
                         "reference_setting.cpus:object"],
    # Without avx512_bf16 or AMX torch's autocast is not run: its rate and the ratios to it are absent or null.
    "precision_throughput": ["config:str", "tokens_per_s.torch_fp32", "vs_torch_autocast:object",
                             "vs_torch_autocast_compiled:object",
                             "torch_blas.library:str", "ceilings_gflops.fp32_fma", "ceilings_gflops.bf16_dot",
                             "ceilings_gflops.amx_bf16",
                             "ceilings_gflops.bf16_engine", "ceilings_gflops.sgemm_peak", "step_gemms_gflops.fp32",
                             "step_gemms_gflops.bf16", "bf16_gemm_share_of_probe", "bf16_engine:str", "fp32_mfu",
                             "fp32_share_of_sgemm_peak", "bf16_step_floor_s", "targets_met.*:bool"] +
                            [path for mode in ("fp32", "mixed", "bf16", "bf16_sr", "bf16_kahan", "mixed_emulated")
                             for path in (f"tokens_per_s.hlat_{mode}", f"vs_hlat_fp32.{mode}")] +
                            [f"{key}.{mode}" for mode in ("mixed", "bf16", "bf16_sr", "bf16_kahan")
                             for key in ("share_of_floor", "update_bound_share_of_floor", "share_of_roofline")] +
                            [f"profile.{mode}.{key}" for mode in ("fp32", "mixed", "bf16", "bf16_sr", "bf16_kahan")
                             for key in ("step_ms", "compute_bound_ms", "memory_bound_ms", "outside_kernels_ms",
                                         "memory_gbs", "compute_bound_at_ceiling_ms",
                                         "memory_bound_at_bandwidth_ms", "memory_bound_per_kernel_ms.*",
                                         "memory_bound_per_kernel_at_bandwidth_ms.*")],
    "internals_overhead": ["config:str", "cpu:str", "steps_each", "median_step_s.internals", "median_step_s.off",
                           "median_cpu_s.internals", "median_cpu_s.off", "ratio_wall", "ratio_cpu",
                           "ratio_paired_median", "ratio_paired_all.*", "target_met.overhead_le_3pct:bool"],
    "side_by_side": ["threads", "rounds", "steps", "runs.*.config:str", "runs.*.mode:str",
                     "runs.*.baseline_tokens_per_s", "runs.*.candidate_tokens_per_s", "runs.*.ratio"],
    # A layout's bus bandwidths are null where it has no such communication: checked on rows that have it.
    "scaling": ["cores", "price_per_machine_hour", "preflight_passed.2:bool", "preflight_passed.4:bool"] +
               [f"layouts.{layout}.{key}" for layout in ("D1T1", "D2T1", "D1T2", "D1T2 SP", "D2T1 ZeRO-1", "D4T1",
                                                         "D2T2", "D1T4", "D1T4 SP", "D4T1 ZeRO-1")
                for key in ("processes", "tokens_per_s", "step_s", "efficiency", "cpt", "cpt_vs_base", "dp_comm_s",
                            "dp_comm_exposed_s", "tp_comm_s", "comm_share", "stream_activation_bytes_per_rank",
                            "activation_bytes_per_rank")] +
               [f"layouts.{layout}.{key}" for layout in ("D2T1", "D2T1 ZeRO-1", "D4T1", "D4T1 ZeRO-1")
                for key in ("achieved_busbw_gbs", "preflight_busbw_gbs")] +
               ["layouts.D1T2.tp_busbw_gbs", "layouts.D1T4.tp_preflight_busbw_gbs.all_reduce",
                "layouts.D1T2 SP.tp_preflight_busbw_gbs.all_gather",
                "layouts.D1T2 SP.tp_preflight_busbw_gbs.reduce_scatter"] +
               [f"layouts.{layout}.sp_memory.{key}" for layout in ("D1T2 SP", "D1T4 SP")
                for key in ("stream_ratio_to_tp_alone", "constant_bytes", "stream_at_most_1_over_tp:bool",
                            "total_as_expected:bool")],
    "kernels": ["kernels.*.ms", "kernels.*.cpu_ms", "kernels.*.iterations", "kernels.BM_MatmulForward.FLOP/s"],
    # lead_median and early_flagged_ahead_share are null without an unstable run (the small mode has none).
    "early_warning": ["seconds", "runs", "unstable_runs", "stable_runs", "early_flagged_ahead", "lead_steps:list",
                      "loss_based_ahead", "early_false_alarms_on_stable", "qk_twins_of_unstable_runs_stable:bool",
                      "lr_fault_flagged_within_2.x3", "lr_fault_flagged_within_2.x10", "lr_fault_flagged_within_2.x30",
                      "targets_met:bool", "lead_median_target_met:bool", "by_peak.*.unstable", "by_peak.*.warned",
                      "by_peak.*.gap_median", "by_peak.*.largest_logit_median", "other_bounds.*.flagged_ahead",
                      "other_bounds.*.stable_flagged", "rows.*.unstable:bool", "rows.*.final_loss",
                      "rows.*.gap_to_twin", "faults.*.flagged_within_2:bool", "cpu:str"],
    "spike_recovery": ["seconds", "steps", "clean_spread.*", "clean_spread_width", "rewind_within_spread:str",
                       "no_recovery_within_spread:str", "rewind_on_grad_spike_within_spread:str",
                       "rewind_mean_gap_to_clean", "no_recovery_mean_gap_to_clean",
                       "rewind_on_grad_spike_mean_gap_to_clean", "rewind_equals_skip_known:str",
                       "clean_grad_spike_alerts", "clean_loss_jump_alerts",
                       "rewind_skip.rewinds", "rewind_skip.rewinds_on_planted", "rewind_skip.rewinds_on_clean_data",
                       "rewind_skip.recomputed_steps", "rewind_skip.recomputed_share",
                       "rewind_skip.skipped_real_batches", "rewind_on_grad_spike.rewinds",
                       "rewind_on_grad_spike.rewinds_on_clean_data", "rewind_on_grad_spike.rewinds_same_step_again",
                       "rewind_on_grad_spike.recomputed_steps", "rewind_on_grad_spike.recomputed_share",
                       "rewind_on_grad_spike.skipped_real_batches", "runs.*.final_heldout_loss",
                       "runs.*.gap_to_clean", "runs.*.within_spread:bool", "cpu:str"],
    "paper_lessons": ["rows.*.lesson:str", "rows.*.paper:str", "rows.*.detector:str", "rows.*.reproduced:bool",
                      "rows.pure_bf16_stall.gap_to_fp32.bf16", "rows.pure_bf16_stall.seed_spread_widest",
                      "rows.pure_bf16_stall.flagged.*.run:str", "rows.pure_bf16_stall.other_runs_flagged:object",
                      "rows.pure_bf16_stall.compare_verdict:str", "rows.one_step_spikes.spike_episodes",
                      "rows.uptime.supervised", "rows.uptime.unsupervised", "minutes"],
    "precision_verdict": ["settings.*.final_heldout.*", "settings.*.mean", "settings.*.spread",
                          "settings.*.verdict:str", "settings.fp32.mean", "settings.bf16.gap", "settings.bf16.margin95",
                          "settings.bf16.lost_updates", "settings.bf16_sr.gap", "settings.bf16_sr.margin95",
                          "settings.bf16_sr.lost_updates", "settings.bf16_kahan.gap", "settings.bf16_kahan.margin95",
                          "settings.bf16_kahan.lost_updates", "settings.mixed.gap", "settings.mixed.margin95",
                          "seeds", "steps", "trained_runs", "minutes"],
    "precision_sweep": ["*.final_train_loss", "*.final_heldout_loss", "*.loss_variance", "*.tokens_per_s",
                        "fp32.final_heldout_loss"] +  # (bf16-beta2-0.99's dot cannot be in a key path)
                       [f"{run}.{key}" for run in ("bf16", "bf16_sr", "bf16_kahan", "mixed", "mixed-emulated")
                        for key in ("loss_gap_vs_fp32", "loss_gap_std")],
    "eval_vs_pytorch": ["items", "threads", "speedup", "tasks.*.requests", "tasks.*.hlat_seconds",
                        "tasks.*.torch_seconds", "tasks.*.speedup", "tasks.*.max_abs_loglik_diff",
                        "tasks.heldout_perplexity.speedup", "tasks.next_sentence_mc4.speedup",
                        "tasks.cloze_lastword.speedup", "torch_blas.library:str"],
    "loader_vs_trainer": ["loader_tokens_per_s", "trainer_tokens_per_s", "ratio"],
    "telemetry_store": ["train_tokens_per_s_store_on", "train_tokens_per_s_store_off", "store_overhead",
                        "raw_rows_per_s", "writer_rows_per_s", "writer_vs_raw", "downsample_1M_to_2000_ms",
                        "heatmap_elements", "heatmap_steps", "heatmap_buckets", "heatmap_reader_ms",
                        "heatmap_http_ms", "heatmap_reply_bytes", "heatmap_repeats", "heatmap_meets_target:bool",
                        "cpu:str"],
    "web_dashboard": ["series_points", "series_ttfb_ms", "series_total_ms", "series_2000_buckets_total_ms",
                      "zoomed_1400_points_total_ms", "page_first_draw_ms", "page_first_draw_max_ms",
                      "sse_commit_to_receipt_ms", "sse_commit_to_receipt_max_ms"],
    "run_page_draw": ["steps", "metrics", "first_draw_ms", "first_draw_max_ms"],
    "page_screenshots": ["steps", "runs", "screenshots.dashboard.bytes", "screenshots.dashboard.width",
                         "screenshots.dashboard.height", "screenshots.compare.bytes", "screenshots.compare.width",
                         "screenshots.compare.height", "console_errors", "seconds"],
    "detector_matrix": [f"{scenario}.{field}" for scenario in
                        ("mask_leak", "grad_spike", "nan gradient", "lr_spike", "allreduce_bug sum",
                         "allreduce_bug skip", "allreduce_bug stale", "TP drift (bf16_sr by rank)")
                        for field in ("detected:bool", "delay_steps", "detector:str", "final_loss")] +
                       # "beta2 0.99, lr 3e-2" too, but its name holds a dot: a key path cannot name it.
                       [f"{run}.{field}" for run in ("clean DP=2", "clean TP=2", "no scaled init, lr 3e-2")
                        for field in ("alerts", "final_loss")] +
                       ["false_alerts_clean"],
    "fuzz": ["seconds_per_target", "compiler:str", "crashes"] +
            [f"targets.{target}.{field}" for target in ("ingest_lines", "config_loader", "query_params", "api_router",
                                                        "http_layer", "tensorboard_reader")
             for field in ("executions", "edges", "features", "corpus", "crashes")] +
            [f"targets.client_reply.{field}" for field in ("executions", "edges", "corpus", "crashes")],
    "soak": ["minutes", "kills", "kills_by_process.trainer", "kills_by_process.server", "kills_by_process.follower",
             "trainer_steps", "committed_steps_lost", "resumes", "steps_compared_after_resume",
             "resumes_bit_identical:bool", "resume_mismatches", "duplicated", "followed_lines", "followed_lines_lost",
             "acknowledged_lines", "acknowledged_lost", "halts", "batches_resent_after_refusal",
             "batches_cut_and_resent", "spike_batches_cut_and_resent", "alerts", "alerts_by_kind:object",
             "duplicated_alerts", "spikes", "spikes_unalerted", "alerts_missed_against_replay",
             "alerts_extra_against_replay", "reader_requests:object", "streams:object", "integrity_check:str",
             "server_peak_rss_mb", "server_rss_mb_by_minute:list"],
    "client_overhead": ["log_in_loop.step_ms_without_client", "log_in_loop.empty_call.median_us",
                        "log_in_loop.empty_call.mean_us"] +
                       [f"log_in_loop.{setting}_{values}.{field}"
                        for setting in ("default", "send_interval_2ms", "max_lag_steps_1")
                        for values in ("floats", "tensors") for field in ("median_us", "p99_us", "mean_us", "step_ms")] +
                       ["log_back_to_back.median_us", "halts.pressed_steps_late:list",
                        "halts.detector_steps_late:list", "halts_at_default.pressed_steps_late:list",
                        "halts_at_default.detector_steps_late:list", "ingest_client_values_per_s",
                        "ingest_raw_values_per_s", "ingest_vectors.values_per_s", "ingest_vectors.values_per_line",
                        "replica.params", "replica.tensors", "replica.tokens_per_step", "replica.step_s",
                        "replica.hash_s", "replica.share_at_every_100_pct",
                        "watch.params", "watch.tensors", "watch.tokens_per_step", "watch.step_s_without",
                        "watch.clip_s_unwatched", "watch.ms_per_watched_step_by_method:object",
                        "watch.overhead_pct", "watch.watch_code_pct", "watch.watch_code_s_per_watched_step"] +
                       [f"watch.{kind}.{field}" for kind in ("every1", "after_unwatched")
                        for field in ("step_s_with", "overhead_pct", "clip_s", "grad_norms_read_s", "hooks_s",
                                      "watch_code_s_per_watched_step", "watch_code_pct")] +
                       ["cpu:str", "load_average", "targets_met.*:bool"],
    "watch_cuda": ["device:str", "torch:str"] +
                  [f"{mode}.{field}" for mode in ("eager", "compiled")
                   for field in ("params", "tokens_per_step", "warmup_s", "step_ms_unwatched", "step_ms_watched",
                                 "overhead_pct", "keys_sent:list", "host_ms_per_watched_step:object")] +
                  ["fsdp2.statistics_compared", "fsdp2.max_rel_diff", "fsdp2.keys:list", "hf_trainer.keys:list",
                   "hf_trainer.transformers:str"],
}


def fail(message):
    sys.exit(f"bench_small: {message}")


def leaves(value, path, parts):
    """The values at a dotted path (parts), `*` expanded; fails naming the path where it breaks."""
    if not parts:
        return [value]
    head, rest = parts[0], parts[1:]
    if head == "*":
        items = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else None
        if not items:
            fail(f"{path}: expected a non-empty object or list, got {json.dumps(value)[:200]}")
        return [leaf for item in items for leaf in leaves(item, path, rest)]
    if not isinstance(value, dict) or head not in value:
        fail(f"{path}: no key {head!r} in {json.dumps(value)[:200]}")
    return leaves(value[head], path, rest)


TYPES = {"number": (int, float), "str": (str,), "bool": (bool,), "list": (list,), "object": (dict,)}


def check_shape(result, paths):
    for spec in paths:
        path, _, kind = spec.partition(":")
        kind = kind or "number"
        for leaf in leaves(result, path, path.split(".")):
            if not isinstance(leaf, TYPES[kind]) or (kind == "number" and isinstance(leaf, bool)):
                fail(f"{path}: expected a {kind}, got {json.dumps(leaf)[:200]}")


def non_finite(value, path="$"):
    """Every number in the result that is NaN or infinite, by path."""
    if isinstance(value, float) and not math.isfinite(value):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in non_finite(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in non_finite(v, f"{path}[{i}]")]
    return []


def main():
    if len(sys.argv) != 2 or not SHAPES.get(sys.argv[1]):
        fail(f"usage: bench_small.py NAME, NAME one of {', '.join(sorted(SHAPES))} (a bench with no key paths "
             f"declared here is not checked)")
    name = sys.argv[1]
    command = COMMANDS.get(name, [os.path.join(ROOT, "bench", name), "--small"])
    print("$", " ".join(command), flush=True)
    proc = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    sys.stdout.write(proc.stdout)
    if proc.returncode != 0:
        fail(f"{name} --small exited {proc.returncode}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        fail(f"{name} --small printed nothing")
    try:
        result = json.loads(lines[-1])
    except json.JSONDecodeError as e:
        fail(f"{name} --small: its last line is not JSON ({e}): {lines[-1][:200]}")
    if not isinstance(result, dict):
        fail(f"{name} --small: its last line is not a JSON object: {lines[-1][:200]}")
    check_shape(result, SHAPES[name])
    bad = non_finite(result)
    if bad:
        fail(f"{name} --small: not finite: {', '.join(bad[:20])}")
    print(f"bench_small: {name}: {len(SHAPES[name])} key paths there, every number finite")


if __name__ == "__main__":
    main()
