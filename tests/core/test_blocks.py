"""The one Slurm 24.11 block rule (core.blocks): what the wizard, the renderer and re-carving all obey."""

import pytest

from core.blocks import BlockPartition, block_layout, block_layout_error


def fleet(*racks: list[int]) -> list[BlockPartition]:
    return [
        BlockPartition(f"r{r:02d}", f"p{i}", size)
        for r, sizes in enumerate(racks, 1)
        for i, size in enumerate(sizes, 1)
    ]


@pytest.mark.parametrize(
    ("racks", "sizes"),
    [
        (([9, 9], [18]), (9, 18)),
        (([18], [9, 9], [9, 9], [18]), (9, 18)),
        (([16, 2],), (2, 16, 32)),
        (([3] * 6, [6, 6, 6]), (3, 6)),
        (([2] * 9, [2] * 9), (2,)),
    ],
)
def test_layouts_slurm_accepts(racks, sizes):
    assert block_layout(fleet(*racks)).block_sizes == sizes


@pytest.mark.parametrize(
    ("racks", "words"),
    [
        (([16, 2], [16, 2]), "would group blocks of racks r01, r02"),
        (([8, 8, 2], [8, 8, 2]), "would group blocks of racks"),
        (([4, 4, 4, 4, 2], [2] * 9), "would group blocks of racks"),
        (([12, 6], [9, 9]), "Slurm 24.11 cannot express NVLink partition"),
    ],
)
def test_layouts_slurm_refuses(racks, words):
    assert words in block_layout_error(fleet(*racks))
