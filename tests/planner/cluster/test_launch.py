"""Launch commands per role: the flags as the engines' sources spell them, the sizer's base command
reused, and the role table's GPUs and nodes.

Flag spellings, from the engines' sources:

* vLLM ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args``, the ParallelConfig group):
  ``--tensor-parallel-size``, ``--pipeline-parallel-size``, ``--data-parallel-size``,
  ``--decode-context-parallel-size``, ``--enable-expert-parallel``; the VllmConfig group:
  ``--kv-transfer-config``. ``vllm/config/kv_transfer.py``: ``kv_connector``, ``kv_role`` in
  ``kv_producer | kv_consumer | kv_both``, ``kv_buffer_device``. Connector names as
  ``vllm/distributed/kv_transfer/kv_connector/factory.py`` registers them: ``NixlConnector``,
  ``LMCacheConnectorV1``; LMCache's producer/consumer roles as
  ``examples/others/lmcache/disagg_prefill_lmcache_v1/disagg_vllm_launcher.sh``.
* SGLang ``python/sglang/srt/server_args.py`` (``ServerArgs``): ``tp_size`` (``--tp-size``, which
  ``--tp`` abbreviates, as SGLang's docs write it), ``dp_size`` → ``--dp-size``, ``ep_size`` →
  ``--ep-size``, ``enable_dp_attention`` → ``--enable-dp-attention``, ``disaggregation_mode``
  (``null | prefill | decode``), ``disaggregation_transfer_backend`` (``DISAGG_TRANSFER_BACKEND_CHOICES``:
  ``mooncake``, ``nixl``, …).
"""

from __future__ import annotations

import json
import shlex
from functools import partial

import pytest

from planner.cluster.launch import (
    LaunchSettings, kv_transfer_config, role_table, sglang_role_command, vllm_role_command,
)
from planner.cluster.parallel import ParallelLayout
from planner.cluster.pools import plan_aggregated, plan_disaggregated
from sizing.checkpoints import Launchable
from sizing.engine.launch import LaunchPlan, vllm_command
from support.cluster_toy import LOAD, toy_spec

# The toy's figures are worked on the reference formula's budget (0.9 × 10 GB − 2 GB = 7 GB);
# the default budget, vLLM's memory profile, is checked in test_budget.py.
_toy = partial(toy_spec, budget="formula")

TOY_REPO = Launchable(weight_format="bf16", repo="org/toy")


def _settings(**kwargs) -> LaunchSettings:
    base = dict(launchable=TOY_REPO, kv_dtype="bf16", max_model_len=1100, gpu_memory_utilization=0.9, block_size=16,
                moe=False)
    return LaunchSettings(**{**base, **kwargs})


def _flags(command: str) -> list[str]:
    return shlex.split(command)


def _value(command: str, flag: str) -> str:
    words = _flags(command)
    return words[words.index(flag) + 1]


def test_vllm_reuses_the_sizers_command_and_adds_the_role():
    command = vllm_role_command(_settings(), ParallelLayout(tp=2), "decode", max_num_seqs=249)
    base = vllm_command(LaunchPlan(model_repo="org/toy", tp=2, kv_dtype="bf16", max_model_len=1100,
                                   gpu_memory_utilization=0.9, max_num_seqs=249, block_size=16,
                                   max_num_batched_tokens=8192))
    assert command.startswith(base + " ")
    assert _value(command, "--tensor-parallel-size") == "2"
    assert json.loads(_value(command, "--kv-transfer-config")) == {"kv_connector": "NixlConnector",
                                                                   "kv_role": "kv_both"}


def test_vllm_moe_layout_flags():
    layout = ParallelLayout(tp=2, pp=2, dp=4, ep=True, pp_layer_partition="31,30")
    command = vllm_role_command(_settings(moe=True), layout, "aggregated", max_num_seqs=64)
    assert command.startswith("VLLM_PP_LAYER_PARTITION=31,30 vllm serve ")
    assert _value(command, "--pipeline-parallel-size") == "2"
    assert _value(command, "--data-parallel-size") == "4"
    assert "--enable-expert-parallel" in _flags(command)
    assert "--kv-transfer-config" not in _flags(command)  # an aggregated pool transfers nothing
    assert _value(command, "--max-num-seqs") == "64"  # per DP rank: each rank is its own engine


@pytest.mark.parametrize("connector,role,kv_role", [
    ("nixl", "prefill", "kv_both"), ("nixl", "decode", "kv_both"),
    ("lmcache", "prefill", "kv_producer"), ("lmcache", "decode", "kv_consumer"),
])
def test_kv_transfer_config_per_connector_and_role(connector, role, kv_role):
    config = json.loads(kv_transfer_config(_settings(connector=connector), role))
    assert config == {"kv_connector": {"nixl": "NixlConnector", "lmcache": "LMCacheConnectorV1"}[connector],
                      "kv_role": kv_role}


def test_nixl_stages_through_the_host_when_the_plan_does():
    config = json.loads(kv_transfer_config(_settings(kv_buffer_device="cpu"), "decode"))
    assert config["kv_buffer_device"] == "cpu"


def test_sglang_data_parallel_attention_is_the_whole_replica_as_tp():
    # TP 1 × DP 8 with EP: SGLang's TP size is all 8 GPUs, attention TP 8 ÷ 8 = 1; each DP rank's
    # scheduler takes max_running_requests ÷ dp_size, so the flag carries 8 × 80.
    command = sglang_role_command(_settings(moe=True, transfer_backend="mooncake"),
                                  ParallelLayout(tp=1, dp=8, ep=True), "decode", max_num_seqs=80)
    words = _flags(command)
    assert words[:3] == ["python", "-m", "sglang.launch_server"]
    assert (_value(command, "--tp"), _value(command, "--dp-size"), _value(command, "--ep-size")) == ("8", "8", "8")
    assert "--enable-dp-attention" in words
    assert _value(command, "--max-running-requests") == "640"
    assert _value(command, "--disaggregation-mode") == "decode"
    assert _value(command, "--disaggregation-transfer-backend") == "mooncake"
    assert _value(command, "--mem-fraction-static") == "0.9"


def test_sglang_dense_data_parallel_ranks_are_replicas():
    command = sglang_role_command(_settings(), ParallelLayout(tp=2, dp=2), "prefill", max_num_seqs=32)
    assert (_value(command, "--tp"), _value(command, "--dp-size")) == ("2", "2")
    assert "--enable-dp-attention" not in _flags(command)
    assert _value(command, "--max-running-requests") == "32"
    assert _value(command, "--disaggregation-mode") == "prefill"


def test_role_table_gpus_nodes_and_commands():
    plan = plan_disaggregated(_toy(), LOAD, prefill=ParallelLayout(), decode=ParallelLayout(tp=2))
    rows = role_table(plan, _settings(), gpus_per_node=8)
    assert [r.role for r in rows] == ["prefill", "decode"]
    for row, pool in zip(rows, plan.pools, strict=True):
        assert row.gpus == pool.replicas * pool.layout.gpus
        per_node = 8 // pool.layout.gpus
        assert row.nodes == -(-pool.replicas // per_node)  # whole replicas per 8-GPU node
        assert _value(row.vllm, "--tensor-parallel-size") == str(pool.layout.tp)
        assert _value(row.sglang, "--disaggregation-mode") == row.role
    # The decode pool's --max-num-seqs is its batch cap per DP rank (the TPOT target's).
    assert _value(rows[1].vllm, "--max-num-seqs") == str(plan.pools[1].batch_cap_per_dp_rank)
    joint = role_table(plan_aggregated(_toy(), LOAD, layout=ParallelLayout()), _settings(), gpus_per_node=8)
    assert [r.role for r in joint] == ["aggregated"] and "--disaggregation-mode" not in _flags(joint[0].sglang)


def test_no_command_for_a_kv_dtype_no_engine_caches():
    plan = plan_aggregated(_toy(), LOAD, layout=ParallelLayout())
    (row,) = role_table(plan, _settings(kv_dtype="int4"), gpus_per_node=8)
    assert row.vllm is None and row.sglang is None and "not int4" in row.notes[0]


def test_a_replica_wider_than_a_node_says_so():
    plan = plan_aggregated(_toy(), LOAD, layout=ParallelLayout(tp=4, pp=2))
    (row,) = role_table(plan, _settings(), gpus_per_node=4)
    assert row.nodes == 2 * row.replicas and "spans 2 nodes" in row.notes[0]
