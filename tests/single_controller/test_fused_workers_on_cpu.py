"""Fused workers (verl 0.5's create_colocated_worker_raw_cls / create_colocated_worker_cls_fused).

Several roles live in one actor process; a group over the fused class ``spawn``s (or ``fuse``s) one
view per role whose calls go through ``_fuw_execute("{role}_fwmn_{method}")``. The views must give
the results a separate worker group of each role gives: the hand-computed values of ``DP_COMPUTE_PROTO`` over 2
ranks (one group of 2 processes instead of three: each Ray worker process imports torch and tensordict).
"""

from __future__ import annotations

import ray
import torch
from sc_testlib import AddRankRole, SubtractRole

from hybridrl.protocol import DataProto
from hybridrl.single_controller.base import Worker
from hybridrl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from hybridrl.single_controller.ray.base import create_colocated_worker_cls_fused, create_colocated_worker_raw_cls


def class_dict() -> dict[str, RayClassWithInitArgs]:
    return {
        "actor": RayClassWithInitArgs(cls=ray.remote(AddRankRole)),
        "critic": RayClassWithInitArgs(cls=ray.remote(SubtractRole), config={"b": 10}),
    }


def test_raw_fused_class_builds_every_role_and_routes_by_name():
    fused_cls = create_colocated_worker_raw_cls(class_dict())
    assert fused_cls.__name__ == "FusedWorker_actor_critic" and fused_cls.is_fused_worker
    assert fused_cls.raw_cls_dict == {"actor": AddRankRole, "critic": SubtractRole}
    assert issubclass(fused_cls, Worker)
    worker = fused_cls()  # in-process: rank 0 of 1
    assert isinstance(worker.actor, AddRankRole) and worker.fused_worker_dict["critic"] is worker.critic
    assert worker.critic.get_fused_worker_by_name("actor") is worker.actor  # siblings see each other
    data = DataProto.from_dict({"a": torch.zeros(2)})
    assert worker._fuw_execute("critic_fwmn_sub", data).batch["a"].tolist() == [-10.0, -10.0]


def test_fused_group_views_match_separate_groups(ray_cluster):
    data = DataProto.from_dict({"a": torch.zeros(10)})
    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=3)
    roles = class_dict()
    fused_wg = RayWorkerGroup(pool, create_colocated_worker_cls_fused(roles), name_prefix="fused_")
    try:
        views = fused_wg.spawn(prefix_set=roles.keys())
        # what separate groups of each role give: rank 0 gets rows 0-4 (+0), rank 1 rows 5-9 (+1);
        # the critic subtracts 10 everywhere
        assert views["actor"].add(data).batch["a"].tolist() == [0.0] * 5 + [1.0] * 5
        assert views["critic"].sub(data).batch["a"].tolist() == [-10.0] * 10
        assert views["actor"].pid() == views["critic"].pid() and len(set(views["actor"].pid())) == 2
        assert not hasattr(views["actor"], "sub") and not hasattr(views["critic"], "add")
        siblings = views["critic"].sibling_pids()
        assert [sorted(s) for s in siblings] == [["actor", "critic"]] * 2
        fused_wg.fuse(prefix_set=roles.keys())
        assert fused_wg.actor.pid() == views["actor"].pid()
        assert fused_wg.critic.sub(data).batch["a"].tolist() == [-10.0] * 10
    finally:
        fused_wg.kill()
        pool.release()
