"""RayResourcePool: bundle shapes per device, and one STRICT_PACK placement group per node on a real cluster."""

from __future__ import annotations

from ray.util.placement_group import placement_group_table

from hybridrl.single_controller.ray import RayResourcePool


def test_bundle_is_cpu_only_for_the_cpu_backend_and_gets_a_device_on_gpu():
    # a bundle is one device slot; its CPU count is the colocation budget (max_colocate_count)
    assert RayResourcePool([2], use_gpu=False, max_colocate_count=3).bundle("cpu") == {"CPU": 3.0}
    assert RayResourcePool([2], use_gpu=True, max_colocate_count=3).bundle("cuda") == {"CPU": 3.0, "GPU": 1.0}
    labelled = RayResourcePool([1], use_gpu=True, max_colocate_count=1, accelerator_type="A100").bundle("cuda")
    assert labelled == {"CPU": 1.0, "GPU": 1.0, "accelerator_type:A100": 1e-3}


def test_one_strict_pack_group_per_node_with_cpu_bundles(ray_cluster):
    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1, name_prefix="shape_")
    try:
        (pg,) = pool.get_placement_groups(device_name="cpu")
        assert pool.get_placement_groups(device_name="cpu") == [pg]  # created once, then cached
        table = placement_group_table(pg)
        assert table["strategy"] == "STRICT_PACK"
        assert [dict(b) for b in table["bundles"].values()] == [{"CPU": 1.0}, {"CPU": 1.0}]
        assert table["name"].startswith("shape_")
    finally:
        pool.release()
    assert pool.pgs is None
