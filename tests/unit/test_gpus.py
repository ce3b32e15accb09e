"""--socialbias-gpus has one meaning everywhere: indices into the GPUs this process can see
(an inherited CUDA_VISIBLE_DEVICES, as a scheduler such as Slurm sets it, respected), or
GPU-/MIG- UUIDs. A started server gets the physical entries; an hf: model the cuda:N
inside this process. No GPU is needed to check the mapping."""

from __future__ import annotations

import pytest

from pytest_socialbias.errors import ConfigError
from pytest_socialbias.models import managed, parse_spec


def test_indices_count_within_the_inherited_devices():
    slurm = {"CUDA_VISIBLE_DEVICES": "4,5"}
    assert managed.check_gpus("0,1", environ=slurm) == "0,1"
    assert managed.physical("0,1", slurm) == "4,5" and managed.physical("1", slurm) == "5"
    assert managed.logical("1", slurm) == [1]
    with pytest.raises(ConfigError, match=r"index 2 is beyond the 2 GPU\(s\) this process can see \(CUDA_VISIBLE_DEVICES=4,5\)"):
        managed.check_gpus("0,2", environ=slurm)
    # Nothing inherited: every GPU of the machine is visible, by its index.
    assert managed.physical("2,3", {}) == "2,3" and managed.logical("2,3", {}) == [2, 3]


def test_uuids_and_mig_ids_are_taken():
    mig = {"CUDA_VISIBLE_DEVICES": "MIG-aaaa,MIG-bbbb"}
    assert managed.check_gpus("MIG-bbbb", environ=mig) == "MIG-bbbb"
    assert managed.physical("MIG-bbbb", mig) == "MIG-bbbb" and managed.logical("MIG-bbbb", mig) == [1]
    assert managed.physical("0", mig) == "MIG-aaaa"
    with pytest.raises(ConfigError, match="GPU-cccc is not among the GPUs this process can see"):
        managed.check_gpus("GPU-cccc", environ=mig)
    for bad in ("0,0", "cuda:0", "", "1,x"):
        with pytest.raises(ConfigError, match="distinct GPU indices"):
            managed.check_gpus(bad, environ={})


def test_started_servers_get_the_physical_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    spec = parse_spec("server:/m.gguf?command=serve --port {port}&replicas=2")
    plans = managed.plans_for(spec, "--target", "0,1,2,3")
    assert [dict(p.env)["CUDA_VISIBLE_DEVICES"] for p in plans] == ["4,5", "6,7"]
    one = managed.plan_for(parse_spec("server:/m.gguf?command=serve --port {port}"), "--target", "1")
    assert dict(one.env) == {"CUDA_VISIBLE_DEVICES": "5"}
    assert managed.plan_for(parse_spec("server:/m.gguf?command=serve --port {port}"), "--target", None).env == ()


def test_vllm_layouts_that_cannot_fit_are_refused_before_any_server_starts():
    def check(spec, gpus, workers):
        managed.check_gpu_fit(parse_spec(spec), "--target", gpus, workers)

    check("vllm:/m?placement=worker", "0,1", 2)  # one server per GPU
    with pytest.raises(ConfigError, match=r"3 vLLM servers on 2 GPU\(s\) \(0,1\) put 2 on one GPU, each claiming 90%.*"
                                          r"gpu_memory_utilization=0.45"):
        check("vllm:/m?placement=worker", "0,1", 3)
    check("vllm:/m?placement=worker&gpu_memory_utilization=0.45", "0,1", 3)  # two halves fit
    with pytest.raises(ConfigError, match=r"tensor_parallel_size=2, but each of the 2 vLLM server\(s\) gets 1 of the 2"):
        check("vllm:/m?replicas=2&tensor_parallel_size=2", "0,1", 0)
    check("vllm:/m?replicas=2&tensor_parallel_size=2", "0,1,2,3", 0)
    check("vllm:/m?placement=worker", None, 8)  # no GPU list: nothing to check against
    check("server:/m.gguf?command=serve --port {port}&placement=worker", "0", 4)  # not vLLM
