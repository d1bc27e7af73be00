"""The collectives of a compiled step, read from XLA's optimised HLO: the lines below are shortened
from the two-H100 steps of docs/benchmarks.md ("What two GPUs add"; jax 0.11.2), in their order."""

from gpuscout.child import collectives

GPU_STEP = """HloModule jit_replica, is_scheduled=true, entry_computation_layout={(f32[64]{0})->f32[64]{0}}

%fused_psum.2458.0.clone (param_0: f32[1048576]) -> f32[1048576] {
  %param_0 = f32[1048576]{0} parameter(0)
  ROOT %all-reduce.3 = f32[1048576]{0} all-reduce(%param_0), replica_groups={{0,1}}, to_apply=%add
}

ENTRY %main.1 (param.1: f32[64], param.2: bf16[256,224,224,3]) -> f32[64] {
  %param.1 = f32[64]{0} parameter(0)
  %param.2 = bf16[256,224,224,3]{3,2,1,0} parameter(1)
  %loop_add_fusion.1 = f32[64]{0} fusion(%param.1), kind=kLoop, calls=%fused_add.1
  %fusion-start.26 = ((f32[1048576]{0}), f32[1048576]{0}) fusion-start(%bitcast.5275), kind=kCustom, calls=%fused_psum.2458.0.clone, metadata={op_name="jit(replica)/shard_map/psum"}, backend_config={"fusion_backend_config":{"block_level_fusion_config":{"num_warps":"16"},"kind":"__triton_collective"}}
  %fusion-done.26 = f32[1048576]{0} fusion-done(%fusion-start.26), backend_config={"fusion_backend_config":{"kind":"__triton_collective"}}
  %all-reduce.16 = f32[1048577]{0} all-reduce(%wrapped_concatenate), channel_id=1, replica_groups=mesh['replicas'=2] {'replicas'}, to_apply=%region_165.166
  %all-reduce-start.2 = ((f32[5637888]{0}), f32[5637888]{0}) all-reduce-start(%wrapped_concatenate.2), channel_id=1, to_apply=%region_327.328, output_to_operand_aliasing={{1}: (0, {})}
  %input_reduce_fusion.290 = f32[64]{0} fusion(%param.2), kind=kInput, calls=%fused_reduce.290, metadata={op_name="jit(replica)/shard_map/transpose(jvp(conv1_bn))/reduce_sum"}
  %get-tuple-element.2717 = f32[64]{0} get-tuple-element(%loop_add_multiply_fusion.105), index=0
  %cudnn-conv-bw-filter.93 = (bf16[3,3,64,64]{3,2,1,0}, u8[0]{0}) custom-call(%a, %b), custom_call_target="__cudnn$convBackwardFilter"
  %all-reduce-done.2 = f32[5637888]{0} all-reduce-done(%all-reduce-start.2)
  %all-reduce-start.3 = ((bf16[1024]{0}, f32[16]{0}), bf16[1024]{0}, f32[16]{0}) all-reduce-start(%x, %y), channel_id=2, to_apply=%add
  %all-reduce-done.3 = (bf16[1024]{0}, f32[16]{0}) all-reduce-done(%all-reduce-start.3)
  ROOT %wrapped_slice.93 = f32[64]{0} fusion(%all-reduce-done.2), kind=kLoop, calls=%wrapped_slice_computation.93
}
"""


def test_every_kind_of_collective_with_its_payload_and_what_runs_beside_it():
    found, instructions = collectives.collectives(GPU_STEP)
    assert instructions == 14  # the entry's instructions, in schedule order
    assert [(c["op"], c["bytes"], c["operands"], c["compute_between"]) for c in found] == [
        # XLA's Triton all-reduce: its result aliases its operand, counted once (2^20 floats)
        ("triton all-reduce-start", 4 * 2**20, 1, 0),  # done on the next line: nothing beside it
        ("all-reduce", 4 * 1_048_577, 1, 0),  # synchronous
        ("all-reduce-start", 4 * 5_637_888, 1, 2),  # a reduction fusion and a cuDNN call in between
        ("all-reduce-start", 2 * 1024 + 4 * 16, 2, 0),  # two operands of two types
    ]
    assert [c["done_position"] is not None for c in found] == [True, False, True, True]
    assert collectives.schedule(GPU_STEP) == {
        "collectives": 4,
        "payload_bytes": 4 * (2**20 + 1_048_577 + 5_637_888) + 2 * 1024 + 4 * 16,
        "asynchronous": 3,
        "beside_compute": 1,
        "payload_bytes_beside_compute": 4 * 5_637_888,
    }


def test_a_program_without_collectives():
    assert collectives.schedule("ENTRY %main (p: f32[4]) -> f32[4] {\n  ROOT %p = f32[4]{0} parameter(0)\n}\n") == {
        "collectives": 0,
        "payload_bytes": 0,
        "asynchronous": 0,
        "beside_compute": 0,
        "payload_bytes_beside_compute": 0,
    }
