"""Several roles in the same worker processes, and torch.distributed inside a worker group."""

from __future__ import annotations

import ipaddress

import ray
from sc_testlib import CounterRole, GlooWorker, NameRole, make_group, make_proto, teardown

from hybridrl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls,
)


def test_two_roles_share_processes_but_not_state(ray_cluster):
    class_dict = {
        "actor": RayClassWithInitArgs(ray.remote(CounterRole), start=100),
        "critic": RayClassWithInitArgs(ray.remote(NameRole), name="critic"),
    }
    pool = RayResourcePool([2], use_gpu=False, max_colocate_count=1)
    wg = RayWorkerGroup(pool, create_colocated_worker_cls(class_dict), name_prefix="coloc_")
    try:
        views = wg.spawn(prefix_set=class_dict.keys())
        actor, critic = views["actor"], views["critic"]
        assert actor.pid() == critic.pid()  # same processes
        assert len(set(actor.pid())) == 2
        assert actor.increment(5) == [105, 105] and actor.increment(1) == [106, 106]  # state persists per role
        assert actor.async_value() == [106, 106]  # async role method through the colocated class
        assert critic.greet() == ["critic@0", "critic@1"]
        assert not hasattr(critic, "increment") and not hasattr(actor, "greet")
        assert wg.actor_increment(0) == [106, 106] and wg.critic_greet() == ["critic@0", "critic@1"]
        # the critic role's mesh registration is its own (the actor role registered none)
        out = critic.values(make_proto(4))
        assert out.batch["v"].tolist() == [0.5, 1.5, 2.5, 3.5]
    finally:
        teardown(pool, wg)


def test_two_workers_all_reduce_over_gloo_listening_on_loopback_only(ray_cluster):
    pool, wg = make_group(GlooWorker, [2])
    try:
        wg.init_model()
        # rank 0 holds [1, 10], rank 1 holds [2, 20]; the sum is [3, 30] on both
        assert wg.all_reduce() == [[3.0, 30.0], [3.0, 30.0]]
        # every socket the workers listen on, the rendezvous store on MASTER_PORT (rank 0) among them
        master_port = int(wg.execute_rank_zero_sync("get_master_addr_port")[1])
        sockets = wg.listening_sockets()
        assert master_port in {port for _, port in sockets[0]}, sockets[0]
        exposed = [sock for rank_sockets in sockets for sock in rank_sockets if not _is_loopback(sock[0])]
        assert exposed == [], f"worker sockets listening beyond loopback: {exposed}"
    finally:
        teardown(pool, wg)


def _is_loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return (getattr(address, "ipv4_mapped", None) or address).is_loopback
