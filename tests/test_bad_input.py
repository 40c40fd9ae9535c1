"""Every mistake a user can make gets one line, exit code 2, and leaves their files as they were.

One row per bad input: the command line, the exit code, words the message must contain, and
the paths that must be left untouched (or never created). Add a case by adding a row. Paths
in a row are templates: {run} is a finished run directory, {ckpt} its checkpoint, {evil} a
checkpoint whose env is `os:system` writing {marker} ({evilenc}: its encoder), {empty} an empty file, {tmp} a fresh
directory. Rows marked `ray` need a Ray (they cannot be answered before it starts).
"""

import hashlib
import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.common.checkpoint import save_checkpoint
from distrl.common.hardware import cpu_bf16
from distrl.compile import available_backends
from distrl.config import load_config
from distrl.driver.run_state import RunState
from distrl.learner import Learner
from tests.conftest import run_cli

CARTPOLE = "configs/cartpole.yaml"
IPEX = {row["name"]: row for row in available_backends()}["ipex"]


@dataclass
class Case:
    argv: str
    exit_code: int
    words: tuple[str, ...]
    untouched: tuple[str, ...] = ()  # existing paths whose content must not change
    absent: tuple[str, ...] = ()  # paths that must not exist afterwards
    ray: bool = False  # answered only once Ray is up (the cluster's resources are needed)
    rule: str = ""  # the cross-section rule it breaks (distrl/config/rules.py), where it breaks one


TRAIN = f"train {CARTPOLE} --run-dir {{tmp}}/new"
CASES = {
    # --- config, every section --------------------------------------------------------------------------------
    "env.vectorization": Case(
        f"{TRAIN} --set env.vectorization=threads",
        2,
        ("env.vectorization='threads'", "'auto', 'native', 'sync' or 'async'"),
        absent=("{tmp}/new",),
    ),
    "env.num_envs_per_worker": Case(
        f"{TRAIN} --set env.num_envs_per_worker=0", 2, ("env.num_envs_per_worker=0", "greater than 0")
    ),
    "env.id unknown": Case(
        f"{TRAIN} --set env.id=NoSuchEnv-v9",
        2,
        ("env.id='NoSuchEnv-v9'", "not a registered gymnasium env"),
        absent=("{tmp}/new",),
    ),
    "env.kwargs rejected": Case(
        f"{TRAIN} --set 'env.kwargs={{{{nope: 1}}}}'",
        2,
        ("env.kwargs={'nope': 1}", "could not be built", "unexpected keyword"),
        absent=("{tmp}/new",),
    ),
    "env obs space": Case(
        f"{TRAIN} --set env.id=FrozenLake-v1 --set env.vectorization=sync",
        2,
        ("observation space Discrete(16) is not supported", "observations: a Box"),
    ),
    "env action space": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:dict_action_cartpole --set env.vectorization=sync",
        2,
        ("action space Dict(", "actions: Discrete, a 1-d MultiDiscrete or a 1-d Box"),
    ),
    "env dict observations, attention": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:dict_obs_cartpole --set model.type=attention",
        2,
        ("model.type=attention: not with Dict observations; use mlp",),
    ),
    "env factory not an Env": Case(
        f"{TRAIN} --set env.id=builtins:dict --set env.vectorization=sync",
        2,
        ("the factory returned dict, not a gymnasium.Env",),
    ),
    "agents with different spaces": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:mixed_space_agents --set env.num_envs_per_worker=16",
        2,
        (
            "agent 'agent_2' has observation Box(0.0, 1e+06, (3,), float32)",
            "one shared policy (agents.policies: shared) needs the same spaces for all its agents",
        ),
        absent=("{tmp}/new",),
    ),
    "a policy whose agents' spaces differ": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:mixed_space_agents --set env.num_envs_per_worker=16 --set "
        f"'agents.policies={{{{most: [agent_0, agent_2], one: [agent_1]}}}}'",
        2,
        (
            "agent 'agent_2' has observation Box(0.0, 1e+06, (3,), float32)",
            "policy 'most' needs the same spaces for all its agents",
        ),
        absent=("{tmp}/new",),
    ),
    "agents a copy, given wrong": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:dying_agents --set env.agents_per_copy=2",
        2,
        (
            "env.agents_per_copy=2: env.id='distrl.envs.testing:dying_agents' has 3 agents a copy; leave it out "
            "(distrl reads it from the env)",
        ),
        absent=("{tmp}/new",),
    ),
    "agents, a minibatch the slots' batch cannot hold": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:dying_agents --set env.num_envs_per_worker=16 --set "
        "ppo.minibatch_size=7000",
        2,
        (
            "ppo.minibatch_size=7000: must be <= the batch size "
            "rollout.num_workers*env.num_envs_per_worker*env.agents_per_copy*rollout.rollout_length=6144",
        ),
        absent=("{tmp}/new",),
    ),
    "agents of a turn-based game": Case(
        f"{TRAIN} --set env.id=pettingzoo/classic/connect_four-v3",
        2,
        (
            "env.id='pettingzoo/classic/connect_four-v3': a turn-based (AEC) game; train it by self-play with a league "
            "section",
        ),
    ),
    "agents vectorized async": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:dying_agents --set env.num_envs_per_worker=16 --set "
        "env.vectorization=async",
        2,
        ("env.vectorization=async: a PettingZoo parallel env's copies step in the worker's process; use auto or sync",),
    ),
    "agents and videos": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:dying_agents --set env.num_envs_per_worker=16 --set "
        "logging.video_every_iterations=5",
        2,
        ("logging.video_every_iterations=5: videos of a PettingZoo parallel env are not recorded yet",),
        absent=("{tmp}/new",),
    ),
    "agents.policies, an agent without one": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:cartpole_team --set env.num_envs_per_worker=16 --set "
        f"'agents.policies={{{{a: [pole_0]}}}}'",
        2,
        ("agents.policies: agent 'pole_1' matches no policy's patterns; every agent needs one (policies: a)",),
        absent=("{tmp}/new",),
    ),
    "agents.policies, an agent in two": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:cartpole_team --set env.num_envs_per_worker=16 --set "
        f"'agents.policies={{{{a: [pole_*], b: [pole_1]}}}}'",
        2,
        ("agents.policies: agent 'pole_1' matches a and b; every agent needs exactly one policy",),
        absent=("{tmp}/new",),
    ),
    "agents.policies, a policy without agents": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:cartpole_team --set env.num_envs_per_worker=16 --set "
        f"'agents.policies={{{{a: [pole_*], red: [red_*]}}}}'",
        2,
        ("agents.policies.red=['red_*']: matches no agent; the env's agents are pole_0, pole_1, pole_2",),
        absent=("{tmp}/new",),
    ),
    "agents.policies, a single-agent env": Case(
        f"{TRAIN} --set agents.policies=per_agent",
        2,
        (
            "agents.policies=per_agent: several policies need a PettingZoo parallel env (env.id='CartPole-v1' is a "
            "gymnasium env); use shared",
        ),
        absent=("{tmp}/new",),
    ),
    "agents.policies, DDP shards": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:cartpole_team --set env.num_envs_per_worker=16 --set "
        f"'agents.policies={{{{solo: [pole_0], pair: [pole_1, pole_2]}}}}' --set learner.num_learners=3 --set "
        "ppo.minibatch_size=384",
        2,
        (
            "learner.num_learners=3: policy 'solo' has 16 slots a worker (16 copies x 1 agent), "
            "which do not split into "
            "3 equal learner shards; use env.num_envs_per_worker a multiple of 3",
        ),
        absent=("{tmp}/new",),
    ),
    "agents.policies, a name": Case(
        f"{TRAIN} --set 'agents.policies={{{{a/b: [pole_0]}}}}'",
        2,
        ("agents.policies", "policy name 'a/b': letters, digits"),
        absent=("{tmp}/new",),
    ),
    "agents.critic, no global state": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:cartpole_team --set env.num_envs_per_worker=16 --set "
        "agents.critic=state",
        2,
        (
            "agents.critic=state: 'distrl.envs.testing:cartpole_team' has no global state (a Box state_space and "
            "state()); use observations",
        ),
        absent=("{tmp}/new",),
    ),
    "agents.critic, a single-agent env": Case(
        f"{TRAIN} --set agents.critic=observations",
        2,
        (
            "agents.critic=observations: a central critic needs a PettingZoo parallel env (env.id='CartPole-v1' is a "
            "gymnasium env)",
        ),
        absent=("{tmp}/new",),
    ),
    "agents.critic, a shared trunk": Case(
        f"{TRAIN} --set agents.critic=observations --set model.shared_trunk=true",
        2,
        ("agents.critic=observations: the actor needs an encoder of its own", "use model.shared_trunk: false"),
        absent=("{tmp}/new",),
        rule="agents",
    ),
    "model.critic_parts, every part": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:dict_obs_cartpole --set env.vectorization=sync --set "
        "'model.critic_parts=[position, velocity]'",
        2,
        ("model.critic_parts=['position', 'velocity']: leaves the actor no part of the observation to read",),
        absent=("{tmp}/new",),
    ),
    "env.action_repeat native": Case(
        f"{TRAIN} --set env.action_repeat=4 --set env.vectorization=native",
        2,
        ("env.action_repeat=4", "auto, sync or async"),
        rule="vector_env",
    ),
    "model.type": Case(
        f"{TRAIN} --set model.type=cnn", 2, ("model.type=cnn: needs image observations",), absent=("{tmp}/new",)
    ),
    "model.conv_layers too deep": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:pixel_cartpole --set 'env.kwargs={{{{height: 10, width: 10, "
        "channels: 4, dtype: bool}}' --set model.type=cnn --set 'model.conv_layers=[[16,3,1],[32,5,2],[64,3,1]]'",
        2,
        (
            "model.conv_layers=[[16, 3, 1], [32, 5, 2], [64, 3, 1]]: observations of shape (10, 10, 4) are 10 x 10 "
            "pixels, 8 x 8 after layer 1, 2 x 2 after layer 2; layer 3 (a 3 x 3 kernel, stride 1) leaves none",
        ),
        absent=("{tmp}/new",),
    ),
    "model.conv_layers form": Case(
        f"{TRAIN} --set 'model.conv_layers=[[16,3]]'",
        2,
        ("model.conv_layers=[[16, 3]]: a list of layers, each [channels, kernel, stride]",),
    ),
    "model.channels where the shape cannot tell": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:pixel_cartpole --set 'env.kwargs={{{{height: 10, width: 10, "
        "channels: 10}}' --set model.type=cnn",
        2,
        ("model.channels=auto: observations of shape (10, 10, 10) could keep their channels first or last",),
        absent=("{tmp}/new",),
    ),
    "model.hidden": Case(f"{TRAIN} --set model.hidden=[]", 2, ("model.hidden=[]", "at least 1 item")),
    "model.activation": Case(
        f"{TRAIN} --set model.activation=swish", 2, ("model.activation='swish'", "'tanh', 'relu', 'elu' or 'gelu'")
    ),
    "model.lstm seq_len": Case(
        f"{TRAIN} --set model.lstm_size=16 --set ppo.seq_len=48",
        2,
        ("ppo.seq_len=48: must divide rollout.rollout_length=128",),
        rule="recurrent",
    ),
    "rollout.num_workers": Case(f"{TRAIN} --set rollout.num_workers=0", 2, ("rollout.num_workers=0", "greater than 0")),
    "rollout.pipeline": Case(
        f"{TRAIN} --set rollout.pipeline=lockstep", 2, ("rollout.pipeline='lockstep'", "'sync', 'overlap' or 'async'")
    ),
    "rollout.max_policy_lag negative": Case(
        f"{TRAIN} --set rollout.pipeline=async --set rollout.max_policy_lag=-1",
        2,
        ("rollout.max_policy_lag=-1", "greater than or equal to 0"),
    ),
    "async with max_policy_lag 0": Case(
        f"{TRAIN} --set rollout.pipeline=async --set rollout.max_policy_lag=0",
        2,
        ("rollout.max_policy_lag=0: async workers sample while the learner updates",),
        rule="async_pipeline",
    ),
    "async samples_per_update": Case(
        f"{TRAIN} --set rollout.pipeline=async --set rollout.samples_per_update=1000",
        2,
        ("rollout.samples_per_update=1000: must be a multiple of one worker's batch", "=8192"),
        rule="async_pipeline",
    ),
    "samples_per_update a word": Case(
        f"{TRAIN} --set rollout.pipeline=async --set rollout.samples_per_update=half",
        2,
        ("rollout.samples_per_update='half': must be a whole number of transitions", "auto or null"),
    ),
    "samples_per_update without async": Case(
        f"{TRAIN} --set rollout.samples_per_update=16384",
        2,
        ("rollout.samples_per_update=16384: only with rollout.pipeline: async",),
        rule="async_pipeline",
    ),
    "updates_ahead without async": Case(
        f"{TRAIN} --set rollout.updates_ahead=2",
        2,
        ("rollout.updates_ahead=2: only with rollout.pipeline: async",),
        rule="async_pipeline",
    ),
    "updates_ahead past max_policy_lag": Case(
        f"{TRAIN} --set rollout.pipeline=async --set rollout.updates_ahead=3 --set rollout.max_policy_lag=2",
        2,
        ("rollout.updates_ahead=3: must be <= rollout.max_policy_lag=2",),
        rule="async_pipeline",
    ),
    "updates_ahead negative": Case(
        f"{TRAIN} --set rollout.pipeline=async --set rollout.updates_ahead=-1",
        2,
        ("rollout.updates_ahead=-1", "greater than or equal to 0"),
    ),
    "env_groups that do not divide the envs": Case(
        f"{TRAIN} --set rollout.env_groups=3",
        2,
        ("rollout.env_groups=3: must divide env.num_envs_per_worker=",),
        rule="env_groups",
    ),
    "env_groups zero": Case(
        f"{TRAIN} --set rollout.env_groups=0",
        2,
        ("rollout.env_groups=0: must be a whole number of groups, 1 or more, or auto",),
    ),
    "env_groups in a league": Case(
        "train configs/league_duel.yaml --set rollout.env_groups=2",
        2,
        ("rollout.env_groups=2: a league run's seats step as one game table",),
        rule="env_groups",
    ),
    "ready_envs on an env that cannot say which copies are ready": Case(
        f"{TRAIN} --set rollout.ready_envs=32",
        2,
        ("rollout.ready_envs=32: needs ale-py's native vector env", "env.id='CartPole-v1'"),
        rule="ready_envs",
    ),
    "ready_envs as many as the copies": Case(
        "train configs/breakout.yaml --set rollout.ready_envs=8",
        2,
        ("rollout.ready_envs=8: must be fewer than env.num_envs_per_worker=8",),
        rule="ready_envs",
    ),
    "ready_envs with an attention window": Case(
        "train configs/breakout.yaml --set rollout.ready_envs=4 --set model.type=attention",
        2,
        ("rollout.ready_envs=4: not with an attention window (model.window=16)",),
        rule="ready_envs",
    ),
    "worker range min > max": Case(
        f"{TRAIN} --set rollout.pipeline=async --set 'rollout.num_workers={{{{min: 4, max: 2}}}}'",
        2,
        ("rollout.num_workers={min: 4, max: 2}: min must be <= max",),
        rule="async_pipeline",
    ),
    "worker range without async": Case(
        f"{TRAIN} --set 'rollout.num_workers={{{{min: 1, max: 2}}}}'",
        2,
        ("rollout.num_workers={min: 1, max: 2}: a range needs rollout.pipeline: async",),
        rule="async_pipeline",
    ),
    "algo": Case(f"{TRAIN} --set algo=impala", 2, ("algo='impala'", "'ppo' or 'appo'")),
    "ppo.proximal": Case(
        f"{TRAIN} --set ppo.proximal=newest", 2, ("ppo.proximal='newest'", "'auto', 'behaviour' or 'learner'")
    ),
    "behaviour weights with auto off async": Case(
        f"{TRAIN} --set ppo.proximal=auto --set ppo.behaviour_weight_clip=2",
        2,
        ("ppo.behaviour_weight_clip=2.0", "it is auto here: behaviour without pipeline async"),
        rule="proximal",
    ),
    "rollout.compile.backend": Case(
        f"{TRAIN} --set rollout.compile.backend=tensorrt", 2, ("rollout.compile.backend='tensorrt'",)
    ),
    "rollout.compile strict": Case(
        f"{TRAIN} --set rollout.compile.backend=ipex --set rollout.compile.strict=true",
        2,
        ("rollout.compile.backend=ipex: unavailable here", "forbids falling back"),
    ),
    "rollout.compile.options ipex": Case(
        f"{TRAIN} --set rollout.compile.backend=ipex --set 'rollout.compile.options={{{{x: 1}}}}'",
        2,
        ("the ipex backend takes no options",),
        rule="rollout_compile",
    ),
    "rollout.compile.options with a mode": Case(
        f"{TRAIN} --set rollout.compile.backend=inductor --set rollout.compile.mode=max-autotune --set "
        f"'rollout.compile.options={{{{freezing: true}}}}'",
        2,
        ("inductor takes options or a mode, not both",),
        rule="rollout_compile",
    ),
    "learner.snapshot_every_s": Case(
        f"{TRAIN} --set learner.snapshot_every_s=-1",
        2,
        ("learner.snapshot_every_s=-1: Input should be greater than or equal to 0",),
    ),
    "learner.num_threads": Case(
        f"{TRAIN} --set learner.num_threads=0",
        2,
        ("learner.num_threads=0: a whole number of threads, 1 or more, or auto",),
    ),
    "rollout.compile.precision": Case(
        f"{TRAIN} --set rollout.compile.precision=fp16",
        2,
        ("rollout.compile.precision='fp16'", "'auto', 'fp32' or 'bf16'"),
    ),
    "rollout.compile.precision onnxrt": Case(
        f"{TRAIN} --set rollout.compile.precision=bf16",
        2,
        ("rollout.compile.precision=bf16: the onnxrt backend runs fp32 only", "eager, inductor, ipex, auto"),
        rule="rollout_compile",
    ),
    "rollout.compile.precision no bf16 CPU": Case(
        f"{TRAIN} --set rollout.compile.backend=eager --set rollout.compile.precision=bf16",
        2,
        ("rollout.compile.precision=bf16: this CPU has no bf16 instructions", "allowed here: auto, fp32"),
        absent=("{tmp}/new",),
    ),
    "rollout.compile.memory_format onnxrt": Case(
        f"{TRAIN} --set rollout.compile.memory_format=channels_last",
        2,
        ("rollout.compile.memory_format=channels_last: the onnxrt backend lays out its own kernels",),
        rule="rollout_compile",
    ),
    "rollout.compile auto strict": Case(
        f"{TRAIN} --set rollout.compile.backend=auto --set rollout.compile.strict=true",
        2,
        ("rollout.compile.strict=true: auto keeps the fastest",),
        rule="rollout_compile",
    ),
    "learner.amp": Case(f"{TRAIN} --set learner.amp=fp8", 2, ("learner.amp='fp8'", "'off', 'bf16' or 'fp16'")),
    "learner.compile.mode": Case(f"{TRAIN} --set learner.compile.mode=fast", 2, ("learner.compile.mode='fast'",)),
    "learner.device cuda": Case(
        f"{TRAIN} --set learner.device=cuda",
        2,
        ("learner.device=cuda: needs learner.num_gpus_per_learner > 0",),
        rule="learner",
    ),
    "learner.num_learners": Case(
        f"{TRAIN} --set learner.num_learners=3",
        2,
        ("learner.num_learners=3: must divide env.num_envs_per_worker=64",),
        rule="batch",
    ),
    "learner GPU on a private Ray": Case(
        f"{TRAIN} --set learner.num_gpus_per_learner=1 --address local",
        2,
        ("learner.num_gpus_per_learner=1: this machine has no CUDA GPU",),
        absent=("{tmp}/new",),
    ),
    "rollout.compile.backend cuda": Case(
        f"{TRAIN} --set rollout.compile.backend=cuda",
        2,
        ("rollout.compile.backend=cuda: needs a GPU share per worker, rollout.num_gpus_per_worker > 0",),
        rule="rollout_compile",
    ),
    "rollout.num_gpus_per_worker onnxrt": Case(
        f"{TRAIN} --set rollout.num_gpus_per_worker=0.1",
        2,
        ("rollout.num_gpus_per_worker=0.1: the onnxrt policy backend runs on the CPU", "cuda or auto"),
        rule="rollout_compile",
    ),
    "worker GPU on a private Ray": Case(
        f"{TRAIN} --set rollout.num_gpus_per_worker=0.1 --set rollout.compile.backend=cuda --address local",
        2,
        ("rollout.num_gpus_per_worker=0.1: this machine has no CUDA GPU", "allowed: 0, or --address"),
        absent=("{tmp}/new",),
    ),
    "ppo.huber_delta": Case(
        f"{TRAIN} --set ppo.value_loss=huber --set ppo.huber_delta=0", 2, ("ppo.huber_delta=0", "greater than 0")
    ),
    "ppo.value_loss": Case(f"{TRAIN} --set ppo.value_loss=l1", 2, ("ppo.value_loss='l1'", "'mse' or 'huber'")),
    "ppo.normalize_value": Case(
        f"{TRAIN} --set ppo.normalize_value=maybe", 2, ("ppo.normalize_value='maybe'", "a valid boolean")
    ),
    "ppo.lr inf": Case(f"{TRAIN} --set ppo.lr=.inf", 2, ("ppo.lr=inf", "finite number")),
    "ppo.lr nan": Case(f"{TRAIN} --set ppo.lr=.nan", 2, ("ppo.lr=nan", "finite number")),
    "ppo.lr negative": Case(f"{TRAIN} --set ppo.lr=-1", 2, ("ppo.lr=-1", "greater than 0")),
    "ppo.gamma": Case(f"{TRAIN} --set ppo.gamma=1.5", 2, ("ppo.gamma=1.5", "less than or equal to 1")),
    "ppo.minibatch_size divides": Case(
        f"{TRAIN} --set ppo.minibatch_size=1000",
        2,
        ("ppo.minibatch_size=1000: must divide the batch size", "8192"),
        rule="batch",
    ),
    "ppo.minibatch_size too big": Case(
        f"{TRAIN} --set ppo.minibatch_size=100000",
        2,
        ("ppo.minibatch_size=100000: must be <= the batch size",),
        rule="batch",
    ),
    "stop all null": Case(
        f"{TRAIN} --set stop.env_steps=null --set stop.episode_return_mean=null",
        2,
        ("set at least one stop condition",),
    ),
    "checkpoint.keep": Case(f"{TRAIN} --set checkpoint.keep=0", 2, ("checkpoint.keep=0", "greater than 0")),
    "eval.best without evaluation": Case(
        f"{TRAIN} --set eval.best=eval",
        2,
        ("eval.best=eval: evaluation is off",),
        absent=("{tmp}/new",),
        rule="evaluation",
    ),
    "stop.eval_return_mean without evaluation": Case(
        f"{TRAIN} --set stop.eval_return_mean=400",
        2,
        ("stop.eval_return_mean=400: evaluation is off",),
        rule="evaluation",
    ),
    "eval.episodes": Case(f"{TRAIN} --set eval.episodes=0", 2, ("eval.episodes=0: must be a whole number, 1 or more",)),
    "env.info_metrics, a string": Case(
        f"{TRAIN} --set env.id=distrl.envs.testing:reporting_cartpole --set env.vectorization=sync "
        "--set 'env.kwargs={{label: blue}}' --set 'env.info_metrics=[label]'",
        2,
        ("env.info_metrics: info['label'] at an episode's end is a str ('blue'); a number or a bool is needed",),
        ray=True,
    ),
    "env.info_metrics not a name": Case(
        f"{TRAIN} --set 'env.info_metrics=[a b]'", 2, ("env.info_metrics.0='a b'", "should match pattern")
    ),
    "logging.progress": Case(f"{TRAIN} --set logging.progress=loud", 2, ("logging.progress='loud'",)),
    "cluster.placement_timeout_s": Case(
        f"{TRAIN} --set cluster.placement_timeout_s=0", 2, ("cluster.placement_timeout_s=0", "greater than 0")
    ),
    "storage.uri": Case(
        f"{TRAIN} --storage nope://bucket",
        2,
        ("storage.uri='nope://bucket/new': cannot open it",),
        absent=("{tmp}/new",),
    ),
    "seed": Case(f"{TRAIN} --set seed=-1", 2, ("seed=-1", "greater than or equal to 0")),
    "unknown section": Case(f"{TRAIN} --set foo.bar=1", 2, ("foo={'bar': 1}: unknown key", "allowed: env, model")),
    "unknown key": Case(f"{TRAIN} --set ppo.learning_rate=1", 2, ("ppo.learning_rate=1: unknown key", "allowed: lr,")),
    "--set without =": Case(f"{TRAIN} --set ppo.lr", 2, ("'ppo.lr': --set takes KEY.PATH=VALUE as one argument",)),
    # --- config files ----------------------------------------------------------------------------------------
    "empty config": Case("train {empty} --run-dir {tmp}/new", 2, ("the file is empty",), absent=("{tmp}/new",)),
    "config not a mapping": Case("train {listcfg} --run-dir {tmp}/new", 2, ("must be a mapping of sections",)),
    "config not YAML": Case("train {badyaml} --run-dir {tmp}/new", 2, ("not valid YAML line",)),
    "config missing": Case("train {tmp}/nope.yaml", 2, ("nope.yaml': no such file",)),
    "config missing, a near name": Case(
        "train configs/cartpol.yaml", 2, ("cartpol.yaml': no such file; did you mean configs/cartpole.yaml?",)
    ),
    "no config": Case("train", 2, ("give a CONFIG file, or --resume RUN_DIR",)),
    # --- trust: an env factory named by a file someone sent is never imported -----------------------------------
    "factory in a config": Case(
        "train {evilcfg} --run-dir {tmp}/new",
        2,
        ("env.id='os:system' (from config", "--trust-env os:system"),
        absent=("{marker}", "{tmp}/new"),
    ),
    "factory in a config, diagnose": Case(
        "diagnose {evilcfg} --quick", 2, ("env.id='os:system' (from config",), absent=("{marker}",)
    ),
    "factory in a checkpoint, eval": Case(
        "eval {evil}",
        2,
        ("env.id='os:system' (from checkpoint", "--trust-env os:system"),
        untouched=("{evil}",),
        absent=("{marker}",),
    ),
    "factory in a checkpoint, export": Case(
        "export {evil} {tmp}/p.onnx", 2, ("env.id='os:system' (from checkpoint",), absent=("{marker}", "{tmp}/p.onnx")
    ),
    "factory in a run dir, resume": Case(
        "train --resume {evilrun}", 2, ("env.id='os:system' (from config",), absent=("{marker}",)
    ),
    "encoder in a config": Case(
        "train {evilenccfg} --run-dir {tmp}/new",
        2,
        ("model.encoder='os:system' (from config", "--trust-model os:system"),
        absent=("{marker}", "{tmp}/new"),
    ),
    "encoder in a checkpoint, export": Case(
        "export {evilenc} {tmp}/p.onnx",
        2,
        ("model.encoder='os:system' (from checkpoint", "trusted_models=['os:system']"),
        absent=("{marker}", "{tmp}/p.onnx"),
    ),
    "model.encoder form": Case(
        f"{TRAIN} --set model.encoder=my_encoders", 2, ("model.encoder='my_encoders'", "package.module:factory")
    ),
    "model.encoder with distrl's own encoder keys": Case(
        f"{TRAIN} --set model.encoder=distrl.models.examples:residual_mlp --set model.layer_norm=true",
        2,
        ("model.layer_norm=True: not with model.encoder='distrl.models.examples:residual_mlp'",),
        rule="user_encoder",
    ),
    "attention heads": Case(
        f"{TRAIN} --set model.type=attention --set model.heads=3",
        2,
        ("model.heads=3: must divide model.d_model=64",),
        rule="attention",
    ),
    "a recurrent league": Case(
        "train configs/league_duel.yaml --set model.lstm_size=16 --set ppo.seq_len=16",
        2,
        ("league: opponents act without a recurrent state",),
        rule="league",
    ),
    "checkpoint env replaced by --env": Case(
        "eval {evil} --env CartPole-v1 --episodes 2", 0, ("2 episodes: return mean",), absent=("{marker}",)
    ),
    # --- commands ----------------------------------------------------------------------------------------------
    "eval episodes 0": Case(
        "eval {run} --episodes 0", 2, ("argument --episodes: must be a positive whole number, got 0",)
    ),
    "eval episodes negative": Case("eval {run} --episodes -3", 2, ("must be a positive whole number, got -3",)),
    "eval missing checkpoint": Case("eval {tmp}/nothing", 2, ("no such file or run directory",)),
    "eval corrupt checkpoint": Case(
        "eval {empty}", 2, ("not a loadable distrl checkpoint", "nothing in it was executed")
    ),
    "eval a policy of a one-policy run": Case(
        "eval {run} --policy blue", 2, ("policy='blue': checkpoint", "holds one policy; give no policy name")
    ),
    "export a policy of a one-policy run": Case(
        "export {ckpt} {tmp}/p.onnx --policy blue",
        2,
        ("policy='blue': checkpoint", "holds one policy"),
        absent=("{tmp}/p.onnx",),
    ),
    "export to a directory": Case("export {ckpt} {tmp}", 2, ("is a directory",), absent=("{tmp}.tmp",)),
    "export unwritable": Case("export {ckpt} /proc/distrl-policy.onnx", 2, ("cannot write there",)),
    "resume a .pt file": Case(
        "train --resume {ckpt}", 2, ("give the run directory", "not a checkpoint file"), untouched=("{ckpt}",)
    ),
    "resume nothing": Case("train --resume {tmp}/none", 2, ("no such run directory",)),
    "resume a directory that is not a run": Case(
        "train --resume {tmp}", 2, ("not a run directory (no config.yaml, no checkpoints/)",)
    ),
    "resume with another run dir": Case(
        "train --resume {run} --run-dir {tmp}/other", 2, ("cannot be combined with --resume",), untouched=("{ckpt}",)
    ),
    "run dir holds a run": Case(
        f"train {CARTPOLE} --run-dir {{run}}",
        2,
        ("already holds a run", "--resume"),
        untouched=("{ckpt}", "{run}/config.yaml"),
    ),
    "run dir not empty": Case(
        f"train {CARTPOLE} --run-dir {{partial}}",
        2,
        ("not empty (holds config.yaml, metrics.jsonl, summary.json)",),
        untouched=("{partial}/config.yaml", "{partial}/metrics.jsonl", "{partial}/summary.json"),
    ),
    "run dir unwritable": Case(
        f"train {CARTPOLE} --run-dir /proc/distrl-run", 2, ("--run-dir='/proc/distrl-run': cannot write there",)
    ),
    "address nobody answers": Case(
        f"{TRAIN} --address 127.0.0.1:9",
        2,
        ("--address=127.0.0.1:9: no Ray cluster answers there",),
        absent=("{tmp}/new",),
    ),
    "unknown argument": Case(f"{TRAIN} --workers 4", 2, ("unrecognized arguments: --workers 4",)),
    "more workers than this machine's CPUs": Case(
        f"{TRAIN} --set rollout.num_workers=64",
        2,
        ("rollout.num_workers=64 x rollout.num_cpus_per_worker=1", "needs 65 CPUs but this machine (a private Ray)"),
        absent=("{tmp}/new",),
    ),
    "a custom resource on a private Ray": Case(
        f"{TRAIN} --set 'rollout.resources={{{{rollout: 1}}}}'",
        2,
        ("rollout.resources={rollout: 1}: needs 1 'rollout' but this machine (a private Ray) has 0",),
    ),
    "--set key and value apart": Case(
        f"{TRAIN} --set ppo.lr 1e-3",
        2,
        ("'ppo.lr': --set takes KEY.PATH=VALUE as one argument",),
        absent=("{tmp}/new",),
    ),
    "eval a config file": Case(
        f"eval {CARTPOLE}", 2, (f"{CARTPOLE}: a config file; eval takes a trained run", "distrl train")
    ),
    "export a config file": Case(
        f"export {CARTPOLE} {{tmp}}/p.onnx", 2, ("a config file; export takes a trained run",), absent=("{tmp}/p.onnx",)
    ),
}


def fake_run(run_dir: Path, overrides=(), iteration=3) -> Path:
    """A finished run directory with a real (untrained) checkpoint, built without Ray."""
    config = load_config(
        None, ["env.num_envs_per_worker=8", "rollout.rollout_length=32", "ppo.minibatch_size=64", *overrides]
    )
    learner = Learner(config, gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text("env: {id: CartPole-v1}\n")
    payload = {
        "counters": RunState(iteration=iteration).state(),
        "learner": learner.state(),
        "config": config.model_dump(mode="json"),
    }
    return save_checkpoint(run_dir, iteration, payload, keep=3)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    base = tmp_path_factory.mktemp("bad-input")
    marker = base / "PWNED"
    paths = {"marker": str(marker)}
    paths["ckpt"] = str(fake_run(base / "run"))
    paths["run"] = str(base / "run")
    payload = torch.load(paths["ckpt"], weights_only=True)
    payload["config"]["env"].update(id="os:system", kwargs={"command": f"touch {marker}"}, vectorization="sync")
    torch.save(payload, base / "evil.pt")  # plain data: it passes torch.load(weights_only=True)
    paths["evil"] = str(base / "evil.pt")
    evil_run = base / "evilrun"
    fake_run(evil_run)
    (evil_run / "config.yaml").write_text(
        f"env: {{id: 'os:system', vectorization: sync, kwargs: {{command: 'touch {marker}'}}}}\n"
    )
    paths["evilrun"] = str(evil_run)
    (base / "evil.yaml").write_text(
        f"env: {{id: 'os:system', vectorization: sync, kwargs: {{command: 'touch {marker}'}}}}\n"
    )
    paths["evilcfg"] = str(base / "evil.yaml")
    encoder = {"encoder": "os:system", "encoder_kwargs": {"command": f"touch {marker}"}}
    payload = torch.load(paths["ckpt"], weights_only=True)
    payload["config"]["model"].update(encoder)
    torch.save(payload, base / "evil_encoder.pt")
    paths["evilenc"] = str(base / "evil_encoder.pt")
    (base / "evil_encoder.yaml").write_text(
        f"model: {{encoder: 'os:system', encoder_kwargs: {{command: 'touch {marker}'}}}}\n"
    )
    paths["evilenccfg"] = str(base / "evil_encoder.yaml")
    (base / "empty.yaml").write_text("")
    paths["empty"] = str(base / "empty.yaml")
    (base / "list.yaml").write_text("- env\n- ppo\n")
    paths["listcfg"] = str(base / "list.yaml")
    (base / "bad.yaml").write_text("env: {id: CartPole-v1\nppo: [\n")
    paths["badyaml"] = str(base / "bad.yaml")
    partial = base / "partial"  # a run killed before its first checkpoint
    partial.mkdir()
    for name in ("config.yaml", "metrics.jsonl", "summary.json"):
        (partial / name).write_text(f"{name} of an earlier run\n")
    paths["partial"] = str(partial)
    return paths


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def skip_reason(name: str) -> str | None:
    """Why a case cannot be asked on this machine (what it refuses is here), or None."""
    if name == "rollout.compile strict" and IPEX["available"]:
        return "ipex is available in this environment"
    if name in ("learner GPU on a private Ray", "worker GPU on a private Ray") and torch.cuda.device_count():
        return "this machine has a CUDA GPU"
    if name == "rollout.compile.precision no bf16 CPU" and cpu_bf16():
        return f"this CPU has {cpu_bf16()}"
    return None


def run_case(name: str, values: dict) -> tuple:
    """The case's command as a user types it, with a private Ray temp dir: (the result, whether it started a Ray)."""
    argv = [part.format(**values) for part in shlex.split(CASES[name].argv)]
    ray_tmp = Path(tempfile.mkdtemp(prefix="rb_", dir="/tmp"))  # short: Ray's socket paths; a Ray started makes ray/
    env = {**os.environ, "RAY_ADDRESS": "local", "RAY_TMPDIR": str(ray_tmp)}
    try:
        result = run_cli(*argv, timeout=300, env=env)
        return result, (ray_tmp / "ray").exists()
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def outcomes(request, files, tmp_path_factory):
    """Every selected case's command, three at a time from the module's start (each is a fresh process whose imports
    are most of its time): name -> (its values, its untouched files' digests from before any case ran, a future of
    ``run_case``)."""
    from concurrent.futures import ThreadPoolExecutor

    names = [
        item.callspec.params["name"]
        for item in request.session.items
        if getattr(item, "originalname", None) == "test_bad_input" and skip_reason(item.callspec.params["name"]) is None
    ]
    planned = {}
    for name in names:
        values = {**files, "tmp": str(tmp_path_factory.mktemp("case"))}
        untouched = {Path(p.format(**values)): digest(Path(p.format(**values))) for p in CASES[name].untouched}
        planned[name] = (values, untouched)
    pool = ThreadPoolExecutor(3)
    yield {name: (*planned[name], pool.submit(run_case, name, planned[name][0])) for name in names}
    pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input(name, outcomes):
    case = CASES[name]
    if skip_reason(name):
        pytest.skip(skip_reason(name))
    values, untouched, future = outcomes[name]
    result, started_ray = future.result()
    message = result.stderr.strip() if case.exit_code else result.stdout
    assert result.returncode == case.exit_code, (result.stdout[-2000:], result.stderr[-2000:])
    for words in case.words:
        assert words in message, message
    if case.exit_code == 2:
        # One line per problem (a config with several problems gets several), each naming key and value.
        assert "Traceback" not in result.stderr and all(line.startswith("distrl") for line in message.splitlines()), (
            message
        )
        assert started_ray == case.ray, "answered before Ray starts" if not case.ray else "needs Ray"
    for path, before in untouched.items():
        assert digest(path) == before, f"{path} was changed"
    for template in case.absent:
        assert not Path(template.format(**values)).exists(), f"{template.format(**values)} was created"


def test_the_table_covers_every_section_command_and_both_trust_cases():
    text = " ".join(case.argv for case in CASES.values())
    for section in (
        "env.",
        "model.",
        "rollout.",
        "learner.",
        "ppo.",
        "stop.",
        "checkpoint.",
        "logging.",
        "cluster.",
        "storage",
        "seed",
    ):
        assert section in text, section
    for command in ("train ", "eval ", "export ", "diagnose ", "--resume "):
        assert command in text, command
    assert "{evilcfg}" in text and "{evil}" in text  # a config that names a factory, and a checkpoint
    assert "{evilenccfg}" in text and "{evilenc}" in text  # the same for an encoder
    assert len(CASES) >= 40


def test_corrupt_newest_checkpoint_falls_back_to_the_newest_intact_with_a_warning(tmp_path):
    newest = fake_run(tmp_path / "run", iteration=3)
    older = newest.with_name("ckpt_0000002.pt")
    older.write_bytes(newest.read_bytes())
    newest.write_bytes(newest.read_bytes()[:100])  # cut short
    result = run_cli("eval", str(tmp_path / "run"), "--episodes", "1", timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (
        f"distrl: warning: '{newest}' is not a loadable checkpoint; using the newest intact one, '{older}'"
        in result.stderr
    )
    assert f"checkpoint {older} (" in result.stdout  # eval says which checkpoint played, and why


def test_export_into_a_directory_not_there_yet_makes_it_and_says_so(tmp_path):
    fake_run(tmp_path / "run")
    out = tmp_path / "new" / "sub" / "policy.onnx"
    result = run_cli("export", str(tmp_path / "run"), str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith(f"created the directory {out.parent}\n") and out.is_file()
    assert [p.name for p in out.parent.iterdir()] == ["policy.onnx"]  # nothing half-written beside it


def test_native_vector_env_that_cannot_reset_is_one_line_not_a_traceback():
    from distrl.envs import EnvFailure
    from distrl.envs.guard import GuardedVectorEnv

    class NoReset(gym.vector.VectorEnv):
        num_envs = 2
        single_observation_space = observation_space = gym.spaces.Box(-1, 1, (2, 3))
        single_action_space = action_space = gym.spaces.Discrete(2)

        def reset(self, **kwargs):
            raise OSError("device not found")

    with pytest.raises(EnvFailure, match=r"^vector env reset raised OSError: device not found$") as caught:
        GuardedVectorEnv(NoReset(), 3).reset(seed=0)
    assert caught.value.errors == 1


def test_an_env_module_that_needs_a_missing_optional_package_names_the_extra(tmp_path, monkeypatch):
    """A user's env module importing PettingZoo where it is not installed: the one line says which extra brings it."""
    import sys

    from distrl.common.errors import EnvSpecError
    from distrl.envs.factory import resolve_env_id

    (tmp_path / "my_team_env.py").write_text("import pettingzoo\n\ndef make():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, "pettingzoo", None)  # as if not installed: its import fails by name
    with pytest.raises(EnvSpecError, match=r"cannot import module 'my_team_env' .*pip install 'distrl\[multiagent\]'"):
        resolve_env_id("my_team_env:make")


def test_each_cross_section_rule_is_named_by_a_case_and_answers_it_alone(monkeypatch):
    """Every rule in ``distrl/config/rules.py`` has a row; a row's message comes from the rule it names: with that
    rule alone the config is refused with the row's words, with every rule but it they are not said."""
    import collections

    from distrl.config import ConfigError, rules

    every = rules.RULES
    assert {case.rule for case in CASES.values() if case.rule} == {rule.__name__ for rule in every}
    for name, case in CASES.items():
        if not case.rule:
            continue
        argv = shlex.split(case.argv.format_map(collections.defaultdict(lambda: "/tmp/unused")))
        overrides = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--set"]
        monkeypatch.setattr(rules, "RULES", tuple(r for r in every if r.__name__ == case.rule))
        with pytest.raises(ConfigError) as refused:
            load_config(argv[1], overrides)
        assert all(words in str(refused.value) for words in case.words), (name, str(refused.value))
        monkeypatch.setattr(rules, "RULES", tuple(r for r in every if r.__name__ != case.rule))
        try:
            load_config(argv[1], overrides)
        except ConfigError as other:
            assert case.words[0] not in str(other), (name, str(other))
