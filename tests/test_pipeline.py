"""Layer placement for a prefill pipelined over several devices (bench/pipeline.py): the flow-shop
makespan by hand, the planner against brute force, llama.cpp's placement rule, the -ts flags."""

import itertools

import pytest

from ridgefill.bench import costmodel, pipeline
from ridgefill.bench.pipeline import Fill, Placer
from ridgefill.errors import InputError

SH = costmodel.SMOLLM2
RIDGE = Fill(split=18, sinks=4, tail=512)


def test_makespan_of_a_two_stage_pipeline_by_hand():
    # two devices, layers (a, b | c): ubatch costs a+b on device 0, c on device 1
    costs = [[1, 1, 5], [1, 1, 5], [1, 1, 5]]
    assert pipeline.makespan(costs, (2, 1)) == 2 + 5 + 5 + 5  # device 1 is the bottleneck after the first ubatch
    assert pipeline.makespan(costs, (1, 2)) == 1 + 6 + 6 + 6
    assert pipeline.makespan(costs, (3,)) == 21  # one device: everything in sequence
    # the first ubatch heavy on device 1: device 0 runs ahead, device 1 never waits after the first
    assert pipeline.makespan([[1, 9], [1, 1], [1, 1]], (1, 1)) == 1 + 9 + 1 + 1


def test_ubatch_costs_add_up_to_the_prefill_cost():
    for fill in (Fill(), RIDGE, Fill(12, 4, 1024, with_map=False, route=0.1), Fill(20, 4, 256, lagged=3)):
        costs = pipeline.ubatch_costs(SH, 3000, 512, fill)
        assert len(costs) == 6 and all(len(row) == SH.n_layer + 1 for row in costs)
        whole = costmodel.prefill_cost(SH, 3000, fill.split, fill.sinks, fill.tail, fill.with_map, fill.route, fill.lagged)
        assert sum(map(sum, costs)) == pytest.approx(whole, rel=1e-12)


def test_the_plan_is_the_best_placement():
    costs = pipeline.ubatch_costs(SH, 2048, 512, RIDGE)
    units = SH.n_layer + 1
    for n_dev in (2, 3):
        best = min(pipeline.makespan(costs, pipeline._counts(c, units))
                   for c in itertools.combinations(range(1, units), n_dev - 1))
        p = pipeline.plan(SH, n_dev, 2048, 512, RIDGE)
        assert p.makespan == best and sum(p.counts) == units and min(p.counts) >= 1


def test_a_fill_moves_layers_to_the_device_that_holds_the_late_ones():
    exact, ridge = (pipeline.plan(SH, 2, 4096, 512, f) for f in (Fill(), RIDGE))
    assert exact.counts[0] > ridge.counts[0]
    # at llama.cpp's even placement the fill gains nothing; at its own placement it does
    costs = pipeline.ubatch_costs(SH, 4096, 512, RIDGE)
    at_even = exact.makespan / pipeline.makespan(costs, pipeline.even(SH.n_layer + 1, 2))
    assert at_even < 1.05 < 1.2 < exact.makespan / ridge.makespan


def test_local_search_finds_a_placement_no_worse_than_even_on_many_devices(monkeypatch):
    monkeypatch.setattr(pipeline, "EXHAUSTIVE_LIMIT", 0)
    p = pipeline.plan(SH, 8, 4096, 256, RIDGE)
    costs = pipeline.ubatch_costs(SH, 4096, 256, RIDGE)
    assert p.makespan < pipeline.makespan(costs, pipeline.even(31, 8)) and sum(p.counts) == 31


@pytest.mark.parametrize("ts, counts", [("1/1", (16, 15)), ("2/5", (9, 22)), ("9/22", (9, 22)), ("2/3", (13, 18)),
                                        ("1/3", (8, 23)), ("1/0", (31, 0)), ("even", (16, 15)), ("1/1/1", (11, 10, 10))])
def test_counts_follow_llama_cpps_loader(ts, counts):
    # llama-model.cpp: layer il goes to the first device whose cumulative share exceeds il / (n_layer + 1)
    assert pipeline.counts_of(ts, 31, len(counts)) == counts


def test_placer_flags_and_bounds():
    auto = Placer(SH, 2, 512, 18, 4, 512)
    assert auto.flags("exact", 2048) == ["-ts", "14/17"] and auto.flags("ridge", 2048) == ["-ts", "9/22"]
    assert auto.bound("ridge", 2048) > Placer(SH, 2, 512, 18, 4, 512, tensor_split="even").bound("ridge", 2048)
    assert Placer(SH, 2, 512, 18, 4, 512, tensor_split="even").flags("ridge", 2048) == []
    assert Placer(SH, 2, 512, 18, 4, 512, tensor_split="3/1").flags("exact", 2048) == ["-ts", "3/1"]
    for idle in (Placer(SH, 1, 512, 18, 4, 512), Placer(SH, 2, 512, 18, 4, 512, ngl=30)):  # one device; output on CPU
        assert not idle.active and idle.flags("ridge", 2048) == [] and idle.bound("ridge", 2048) is None
    assert Placer(SH, 2, 512, 18, 4, 512, ngl=31).active
    assert auto.one_device_bound("ridge", 4096) == pytest.approx(costmodel.bound(SH, 4096, 18, 4, 512))


@pytest.mark.parametrize("bad", ["", "a/b", "1/-1", "0/0", "nan/1", "inf/1", "1//2"])
def test_a_bad_tensor_split_is_refused(bad):
    with pytest.raises(InputError, match="--tensor-split"):
        pipeline.parse_tensor_split(bad)


def test_plan_refuses_impossible_requests():
    with pytest.raises(InputError, match="each device needs a layer"):
        pipeline.plan(SH, 32, 2048, 512)
    with pytest.raises(InputError, match="must be positive"):
        pipeline.plan(SH, 2, 0, 512)
    for bad in (Fill(split=30), Fill(split=-1), Fill(split=18, sinks=-4), Fill(split=18, tail=-1)):
        with pytest.raises(InputError, match="need 0 <= split < 30"):
            pipeline.plan(SH, 2, 2048, 512, bad)


def test_device_runs_are_timed_warm_by_default():
    from ridgefill.bench.ttft import _warm

    cpu, rpc = Placer(SH, 0, 512, 18, 4, 512), Placer(SH, 2, 512, 18, 4, 512)
    assert not _warm(None, cpu, -1, None)  # CPU only: a first prompt costs what later ones do
    assert _warm(None, rpc, -1, None) and _warm(None, cpu, -1, "/opt/cuda/llama-bench")
    assert not _warm(None, rpc, 0, None)  # -ngl 0: nothing on the devices
    assert _warm(True, cpu, -1, None) and not _warm(False, rpc, -1, None)
