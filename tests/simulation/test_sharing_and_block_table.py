"""Block tables (addresses, ref counts, copy-on-write) and the memory sharing saves."""

import numpy as np
import pytest

from simulation.block_table import BlockManager, OutOfBlocks, block_table_demo
from simulation.sharing import beam_search, parallel_sampling, prefix_caching

KIB = 1024


def test_address_formula_of_the_reference_page():
    # block = p // B, offset = p % B, address = table[block] × block_bytes + offset × token_bytes.
    manager = BlockManager(num_blocks=64, block_size=16, token_bytes=160 * KIB,
                           rng=np.random.default_rng(0))
    manager.add_sequence(0, 40)
    address = manager.address(0, 37)
    assert (address.logical_block, address.offset) == (2, 5)
    physical = manager.tables[0][2]
    assert address.physical_block == physical
    assert address.byte_address == physical * 16 * 160 * KIB + 5 * 160 * KIB
    with pytest.raises(ValueError, match="position"):
        manager.address(0, 40)


def test_blocks_are_handed_out_only_when_the_last_one_fills():
    manager = BlockManager(num_blocks=8, block_size=4)
    manager.add_sequence(0, 4)
    assert len(manager.tables[0]) == 1  # 4 tokens fill exactly one block
    manager.append_token(0)
    assert len(manager.tables[0]) == 2  # the 5th token opens a second
    for _ in range(3):
        manager.append_token(0)
    assert len(manager.tables[0]) == 2
    assert [e.kind for e in manager.events] == ["allocate", "allocate"]


def test_fork_shares_then_copy_on_write():
    manager = BlockManager(num_blocks=16, block_size=4)
    manager.add_sequence(0, 6)  # blocks: one full, one with 2 of 4 tokens
    manager.fork(0, 1)
    full, partial = manager.tables[0]
    assert manager.ref_count[full] == 2 and manager.ref_count[partial] == 2
    manager.append_token(1)  # writes into the shared partial block: copy first
    assert manager.copies == 1
    assert manager.tables[1][0] == full and manager.tables[1][1] != partial
    assert manager.ref_count[partial] == 1
    copy = manager.events[-1]
    assert copy.kind == "copy" and copy.source == partial
    manager.append_token(0)  # sequence 0 is now alone in its block: no copy
    assert manager.copies == 1
    manager.free_sequence(0)
    assert manager.ref_count[full] == 1  # still held by sequence 1
    manager.free_sequence(1)
    assert manager.used_blocks == 0


def test_out_of_blocks():
    manager = BlockManager(num_blocks=2, block_size=2)
    with pytest.raises(OutOfBlocks):
        manager.add_sequence(0, 5)


def test_parallel_sampling_closed_form():
    # P = 100, B = 16: 6 full prompt blocks shared; each of 4 samples holds ⌈(4 + 50)/16⌉ = 4.
    result = parallel_sampling(prompt_tokens=100, output_tokens=np.array([50] * 4), block_size=16)
    assert result.blocks_with_sharing == 6 + 4 * 4
    assert result.blocks_without_sharing == 4 * -(-150 // 16)  # 40
    assert result.copies_on_write == 3  # the shared partial block: n − 1 copies
    assert result.saved_fraction == pytest.approx(18 / 40)


def test_parallel_sampling_prompt_on_block_boundary_copies_nothing():
    result = parallel_sampling(prompt_tokens=64, output_tokens=np.array([10, 20, 30]), block_size=16)
    assert result.copies_on_write == 0
    # Peak at step 17: 4 shared prompt blocks + 2 blocks for each of the two samples still
    # running (the 10-token sample finished and freed its block at step 10).
    assert result.blocks_with_sharing == 4 + 2 + 2
    # Unshared peak at step 10: three sequences of 74 tokens, 5 blocks each.
    assert result.blocks_without_sharing == 3 * 5


def test_prefix_caching_shares_only_full_blocks():
    # S = 500, B = 16: 31 full blocks shared; the 4-token tail is each request's own.
    result = prefix_caching(system_prompt_tokens=500, user_tokens=np.array([30] * 10), block_size=16)
    assert result.blocks_without_sharing == 10 * -(-530 // 16)
    assert result.saved_blocks == (10 - 1) * (500 // 16)


def test_beam_search_saves_memory_and_is_seeded():
    first = beam_search(prompt_tokens=200, width=4, steps=64, block_size=16, rng=np.random.default_rng(5))
    again = beam_search(prompt_tokens=200, width=4, steps=64, block_size=16, rng=np.random.default_rng(5))
    assert first == again
    assert first.blocks_without_sharing == 4 * -(-(200 + 64) // 16)
    # The prompt's 12 full blocks are held once: at least 3 × 12 blocks saved.
    assert first.saved_blocks >= 3 * (200 // 16)
    assert first.copies_on_write > 0


def test_block_table_demo_shared_prompt():
    demo = block_table_demo(block_size=4, prompt_tokens=6, sequences=3, steps=3, shared_prompt=True,
                            num_blocks=32, token_bytes=None, rng=np.random.default_rng(0))
    assert demo.lengths == (9, 9, 9)
    first_blocks = {table[0] for table in demo.tables}
    assert len(first_blocks) == 1 and demo.ref_count[first_blocks.pop()] == 3
    assert demo.copies == 2
    unshared = block_table_demo(block_size=4, prompt_tokens=6, sequences=3, steps=3,
                                shared_prompt=False, num_blocks=32, token_bytes=None,
                                rng=np.random.default_rng(0))
    assert len({b for table in unshared.tables for b in table}) == 9
    assert unshared.copies == 0
