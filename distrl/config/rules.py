"""The config's cross-field rules, one function per topic: each takes the whole ``Config`` and returns its problems,
one line each naming the key, the value and what is allowed. ``Config`` runs every rule in ``RULES`` in one pass, so
one validation reports every problem (RLlib's ``validate()`` is such a list of per-topic calls). A rule about one
section's fields alone stays a validator of that section, beside its fields (``schema.py``).
"""

from __future__ import annotations

from distrl.compile.backends import BACKENDS
from distrl.config.league import is_game_id

CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def _is_range(workers) -> bool:
    """``rollout.num_workers`` given as a range (``WorkerRange``: min, max) rather than a number."""
    return not isinstance(workers, int)


def batch(config) -> list[str]:
    """The update's batch against its minibatch and the learners that split it."""
    problems = []
    spu = config.rollout.samples_per_update if config.rollout.pipeline == "async" else None
    size = (
        "rollout.samples_per_update"
        if isinstance(spu, int)
        else "rollout.samples_per_update=auto (as many worker batches, "
        f"{config.worker_batch_words} "
        "each, as ceil(rollout.num_workers*rollout.num_cpus_per_worker))"
        if spu == "auto" and config.update_size != config.batch_size
        else f"rollout.num_workers*{config.worker_batch_words}"
    )
    # The batch's size needs the agents of each env copy: where the env may hold several, checked again once
    # distrl has read them from it (distrl/envs/kinds.py, resolve_agents), before Ray starts.
    if config.env.agents_known:
        if config.ppo.minibatch_size > config.update_size:
            problems.append(
                f"ppo.minibatch_size={config.ppo.minibatch_size}: must be <= the batch size {size}={config.update_size}"
            )
        elif config.update_size % config.ppo.minibatch_size:
            problems.append(
                f"ppo.minibatch_size={config.ppo.minibatch_size}: must divide the batch size {size}="
                f"{config.update_size}, so every gradient step sees exactly that many samples"
            )
    if config.ppo.minibatch_size % config.learner.num_learners:
        problems.append(
            f"ppo.minibatch_size={config.ppo.minibatch_size}: must divide by learner.num_learners="
            f"{config.learner.num_learners} (each learner takes an equal part of every minibatch)"
        )
    if config.env.agents_known and config.env.slots % config.learner.num_learners:
        slots = (
            f"env.num_envs_per_worker={config.env.num_envs_per_worker}"
            if (config.env.agents_per_copy or 1) == 1
            else f"the worker's {config.env.slots} slots ({config.env.num_envs_per_worker} env copies x "
            f"{config.env.agents_per_copy} agents)"
        )
        problems.append(
            f"learner.num_learners={config.learner.num_learners}: must divide {slots} so every learner gets an "
            "equal shard of each worker's batch"
        )
    return problems


def proximal(config) -> list[str]:
    """Weighting samples towards the learner's policy needs the ratio taken from it."""
    if config.ppo.behaviour_weight_clip is None or config.proximal == "learner":
        return []
    return [
        f"ppo.behaviour_weight_clip={config.ppo.behaviour_weight_clip}: weights samples towards the "
        f"learner's policy; needs ppo.proximal=learner (it is {config.ppo.proximal}"
        f"{' here: behaviour without pipeline async' if config.ppo.proximal == 'auto' else ''}), "
        "or leave it null"
    ]


def vector_env(config) -> list[str]:
    """What a native vector env (the env's own) cannot do."""
    problems = []
    if config.env.action_repeat > 1 and config.env.vectorization == "native":
        problems.append(
            f"env.action_repeat={config.env.action_repeat}: needs env.vectorization auto, sync or async "
            "(a native vector env autoresets between repeats)"
        )
    if ":" in config.env.id and config.env.vectorization == "native":
        problems.append(
            f"env.vectorization=native: an env factory ('{config.env.id}') has no native vector env; use auto, sync "
            "or async"
        )
    return problems


def user_encoder(config) -> list[str]:
    """``model.encoder``: the user's module is the encoder, so the keys that describe distrl's own are left alone."""
    model = config.model
    if model.encoder is None and model.encoder_kwargs:
        return ["model.encoder_kwargs: given without model.encoder; name the factory they are for"]
    if model.encoder is None:
        return []
    fixed = {"type": model.type != "mlp", "layer_norm": model.layer_norm, "conv_layers": model.conv_layers is not None}
    return [
        f"model.{key}={getattr(model, key)}: not with model.encoder={model.encoder!r} (your module is the encoder); "
        f"leave model.{key} at its default"
        for key, set_here in fixed.items()
        if set_here
    ]


def attention(config) -> list[str]:
    """An attention model: its heads, its own memory and LayerNorms, a window's padding."""
    model = config.model
    if model.type != "attention" or model.encoder is not None:
        return []
    problems = []
    if model.d_model % model.heads:
        problems.append(f"model.heads={model.heads}: must divide model.d_model={model.d_model}")
    if model.lstm_size > 0:
        problems.append(
            f"model.lstm_size={model.lstm_size}: an attention model keeps its memory in model.window; use lstm_size: 0"
        )
    if model.layer_norm:
        problems.append(
            "model.layer_norm=true: an attention model has its own LayerNorms (pre-norm blocks); use layer_norm: false"
        )
    if config.env.normalize_obs and model.window > 0:
        problems.append(
            "env.normalize_obs=true: not with model.type=attention and a window (the window's "
            "padding would be normalised away); use normalize_obs: false"
        )
    return problems


def recurrent(config) -> list[str]:
    """An LSTM core: its BPTT sequences fit the rollout and the minibatch; no CUDA-graph mode replays it."""
    if config.model.lstm_size == 0:
        return []
    problems = []
    if config.rollout.rollout_length % config.ppo.seq_len:
        problems.append(
            f"ppo.seq_len={config.ppo.seq_len}: must divide rollout.rollout_length={config.rollout.rollout_length}"
        )
    elif config.ppo.minibatch_size % config.ppo.seq_len:
        problems.append(
            f"ppo.minibatch_size={config.ppo.minibatch_size}: must be a multiple of ppo.seq_len={config.ppo.seq_len}"
        )
    for key, mode in (
        ("learner.compile.mode", config.learner.compile.mode),
        ("learner.compile.critic_mode", config.learner.compile.critic_mode),
        ("rollout.compile.mode", config.rollout.compile.mode),
    ):
        if mode in CUDA_GRAPH_MODES:
            problems.append(
                f"{key}={mode}: CUDA-graph modes cannot run recurrent models (model.lstm_size>0): replays "
                "overwrite their outputs, corrupting the rollout buffer, and LSTM allocations fall outside "
                "the graph pool; use mode: default"
            )
    return problems


def env_groups(config) -> list[str]:
    """``rollout.env_groups``: equal groups of the worker's copies, and not a league's one game table."""
    groups = config.rollout.env_groups if config.rollout.env_groups != "auto" else 1
    problems = []
    if groups > 1 and config.env.num_envs_per_worker % groups:
        problems.append(
            f"rollout.env_groups={groups}: must divide env.num_envs_per_worker="
            f"{config.env.num_envs_per_worker} (each group is an equal vector env of the worker's copies)"
        )
    if groups > 1 and config.league is not None:
        problems.append(f"rollout.env_groups={groups}: a league run's seats step as one game table; use 1")
    return problems


def rollout_compile(config) -> list[str]:
    """``rollout.compile``: what the chosen worker backend takes (options, forms, the GPU, strictness)."""
    rc = config.rollout.compile
    spec = BACKENDS[rc.backend]
    problems = []
    if rc.options and not spec.options:
        problems.append(f"rollout.compile.options={rc.options}: the {rc.backend} backend takes no options")
    if rc.options and spec.options_exclude_mode and rc.mode != "default":
        problems.append(
            f"rollout.compile.options={rc.options}: {rc.backend} takes options or a mode, not both "
            f"(rollout.compile.mode={rc.mode}); torch.compile refuses the pair"
        )
    torch_backends = ", ".join(name for name, b in BACKENDS.items() if b.runs_torch or b.chooses)
    if rc.precision == "bf16" and not (spec.runs_torch or spec.chooses):
        problems.append(
            f"rollout.compile.precision=bf16: the {rc.backend} backend runs fp32 only; allowed with "
            f"rollout.compile.backend {torch_backends}"
        )
    if rc.memory_format == "channels_last" and not (spec.runs_torch or spec.chooses):
        problems.append(
            f"rollout.compile.memory_format=channels_last: the {rc.backend} backend lays out its own "
            f"kernels; allowed with rollout.compile.backend {torch_backends}"
        )
    gpus = config.rollout.num_gpus_per_worker
    if rc.backend == "cuda" and gpus == 0:
        problems.append(
            "rollout.compile.backend=cuda: needs a GPU share per worker, rollout.num_gpus_per_worker > 0 "
            "(e.g. 0.1: ten workers to a GPU)"
        )
    if gpus > 0 and rc.backend not in ("cuda", "auto"):
        problems.append(
            f"rollout.num_gpus_per_worker={gpus:g}: the {rc.backend} policy backend runs on the CPU and "
            "would leave the GPU idle; allowed with rollout.compile.backend cuda or auto"
        )
    if rc.strict and spec.chooses:
        problems.append(
            f"rollout.compile.strict=true: {rc.backend} keeps the fastest backend that passes its checks, eager "
            "included, so it never fails; name one backend to make its failure an error"
        )
    return problems


def learner(config) -> list[str]:
    """The learner's critic mode, its device step and its device."""
    problems = []
    if config.learner.compile.critic_mode is not None and config.model.shared_trunk:
        problems.append(
            f"learner.compile.critic_mode={config.learner.compile.critic_mode}: needs a separate critic tower "
            "(model.shared_trunk: false)"
        )
    if config.learner.step == "device":
        for blocker in step_blockers(config):
            problems.append(f"learner.step=device: not with {blocker}; use learner.step: auto or loop")
    if config.learner.device == "cuda" and config.learner.num_gpus_per_learner == 0:
        problems.append("learner.device=cuda: needs learner.num_gpus_per_learner > 0")
    return problems


def step_blockers(config, world_size: int | None = None) -> list[str]:
    """Why the learner's device step (``learner.step``, ``distrl/learner/step.py``) cannot run this config (empty when
    it can); ``distrl/learner/step_rules.py`` chooses the step with them."""
    out = []
    world = config.learner.num_learners if world_size is None else world_size
    if config.model.lstm_size > 0:
        out.append("recurrent models (model.lstm_size>0) train through a per-step loop the graph cannot hold")
    if world > 1:
        out.append("DDP (learner.num_learners>1): its gradient all-reduce hooks run outside a captured graph")
    if config.learner.amp == "fp16":
        out.append("learner.amp=fp16: the gradient scaler reads and updates its scale on the host")
    lc = config.learner.compile
    graph_modes = [mode for mode in (lc.mode, lc.critic_mode) if mode in CUDA_GRAPH_MODES and lc.backend != "eager"]
    if graph_modes:
        out.append(f"learner.compile mode {graph_modes[0]}: torch.compile captures its own CUDA graphs")
    return out


def evaluation(config) -> list[str]:
    """What the best checkpoint and ``stop.eval_return_mean`` need of the eval section."""
    league = config.league is not None
    on = config.eval.enabled(league)
    problems = []
    if config.eval.best == "eval" and not on:
        problems.append(
            "eval.best=eval: evaluation is off (eval.every_iterations=0 and no eval.every_s); turn it on, or "
            "choose the best by episode_return_mean or newest"
        )
    if config.eval.best == "episode_return_mean" and league:
        problems.append(
            "eval.best=episode_return_mean: a league's training return is against ever stronger opponents, so "
            "it ranks no checkpoints; use eval (the default) or newest"
        )
    if config.stop.eval_return_mean is not None and not on:
        problems.append(
            f"stop.eval_return_mean={config.stop.eval_return_mean:g}: evaluation is off; set "
            "eval.every_iterations (or eval.every_s)"
        )
    if config.eval.env_kwargs and league:
        problems.append("eval.env_kwargs: a league run's evaluation plays its last curriculum stage's game")
    return problems


def league(config) -> list[str]:
    """A league trains two-player games with feed-forward policies; distrl's own two-player games need a league
    (a PettingZoo parallel env without one trains its agents with a shared policy: ``distrl/envs/agents.py``)."""
    game = is_game_id(config.env.id)
    if config.league is None:
        own_game = game and not config.env.id.startswith("pettingzoo/")
        return (
            [f"env.id={config.env.id!r}: a two-player game; add a league section to train it by config-play"]
            if own_game
            else []
        )
    problems = []
    if not game:
        problems.append(
            f"env.id={config.env.id!r}: a league needs a two-player game (pettingzoo/REGISTRY_ID, e.g. "
            "pettingzoo/classic/connect_four-v3, or distrl/Duel-v0), not a single-agent env"
        )
    if config.model.lstm_size > 0 or (config.model.type == "attention" and config.model.window > 0):
        problems.append(
            "league: opponents act without a recurrent state or observation window of their own; use a "
            "feed-forward model (model.lstm_size: 0, and no attention window)"
        )
    if config.env.normalize_obs:
        problems.append("env.normalize_obs=true: not with a league (each snapshot would need its own statistics)")
    if config.env.action_repeat > 1:
        problems.append(f"env.action_repeat={config.env.action_repeat}: not with a league (the opponent moves between)")
    return problems


def agents(config) -> list[str]:
    """Several policies (``agents.policies``) train one learner each inside one learner actor: not yet beside DDP
    ranks or a league."""
    problems = []
    if config.agents.critic != "local":
        if config.league is not None:
            problems.append(
                f"agents.critic={config.agents.critic}: a league's game has no central critic yet; use local"
            )
        if "critic" not in config.model.critic_parts:
            problems.append(
                f"agents.critic={config.agents.critic}: the central critic's part is the observation's "
                f"'critic' part, which model.critic_parts={config.model.critic_parts} leaves to the actor; "
                "add critic to model.critic_parts"
            )
        if config.model.shared_trunk:
            problems.append(
                f"agents.critic={config.agents.critic}: the actor needs an encoder of its own (it does not "
                "read the critic's part); use model.shared_trunk: false"
            )
    if not config.agents.several:
        return problems
    shown = config.agents.policies if isinstance(config.agents.policies, str) else "{...}"
    if config.league is not None:
        problems.append(f"agents.policies={shown}: a league trains one policy against its snapshots; use shared")
    return problems


def ready_envs(config) -> list[str]:
    """rollout.ready_envs: the envs and models it can act for (distrl/rollout/ready_runner.py)."""
    ready, env = config.rollout.ready_envs, config.env
    if not ready:
        return []
    problems = []
    if ready >= env.num_envs_per_worker:
        problems.append(
            f"rollout.ready_envs={ready}: must be fewer than env.num_envs_per_worker="
            f"{env.num_envs_per_worker} (the copies acted on at once; 0: all of them together)"
        )
    if not env.id.startswith("ALE/") or env.vectorization not in ("auto", "native") or env.action_repeat > 1:
        problems.append(
            f"rollout.ready_envs={ready}: needs ale-py's native vector env (an ALE/ env id with "
            f"env.vectorization auto or native; here env.id={env.id!r}, env.vectorization="
            f"{env.vectorization}), the one env here that returns its copies as they become ready; "
            "use 0"
        )
    if config.model.type == "attention" and config.model.window > 0:
        problems.append(
            f"rollout.ready_envs={ready}: not with an attention window (model.window="
            f"{config.model.window}); use model.window: 0, an LSTM (model.lstm_size) or ready_envs: 0"
        )
    if config.rollout.env_groups not in (1, "auto"):
        problems.append(
            f"rollout.ready_envs={ready}: not with rollout.env_groups={config.rollout.env_groups} (acting "
            "on ready copies already overlaps the env and the policy); use env_groups 1 or auto"
        )
    if config.league is not None:
        problems.append(f"rollout.ready_envs={ready}: a league's game table steps as one; use 0")
    return problems


def async_pipeline(config) -> list[str]:
    """What only pipeline async takes (an update's own size, sampling ahead, a range of workers), and its bounds."""
    rollout = config.rollout
    if rollout.pipeline != "async":
        problems = (
            [
                f"rollout.samples_per_update={rollout.samples_per_update}: only with rollout.pipeline: async (a "
                f"{rollout.pipeline} round is every worker's batch)"
            ]
            if isinstance(rollout.samples_per_update, int)
            else []
        )
        if rollout.updates_ahead != 1:
            problems.append(
                f"rollout.updates_ahead={rollout.updates_ahead:g}: only with rollout.pipeline: async (a "
                f"{rollout.pipeline} round samples one update's batches)"
            )
        if _is_range(rollout.num_workers):
            problems.append(
                f"rollout.num_workers={{min: {rollout.num_workers.min}, max: {rollout.num_workers.max}}}: "
                f"a range needs rollout.pipeline: async (a {rollout.pipeline} round waits for a fixed set "
                "of workers)"
            )
        return problems
    problems = []
    if _is_range(rollout.num_workers) and rollout.num_workers.min > rollout.num_workers.max:
        problems.append(
            f"rollout.num_workers={{min: {rollout.num_workers.min}, max: {rollout.num_workers.max}}}: "
            "min must be <= max"
        )
    if rollout.max_policy_lag < 1:
        problems.append(
            "rollout.max_policy_lag=0: async workers sample while the learner updates, so every batch "
            "is at least 1 version old at its update; use 1 or more (or rollout.pipeline: sync)"
        )
    if rollout.max_policy_lag >= 1 and rollout.updates_ahead > rollout.max_policy_lag:
        problems.append(
            f"rollout.updates_ahead={rollout.updates_ahead:g}: must be <= rollout.max_policy_lag="
            f"{rollout.max_policy_lag} (batches sampled further ahead would be dropped as stale)"
        )
    if (
        config.env.agents_known
        and isinstance(rollout.samples_per_update, int)
        and rollout.samples_per_update % config.worker_batch_size
    ):
        problems.append(
            f"rollout.samples_per_update={rollout.samples_per_update}: must be a multiple of one "
            f"worker's batch, {config.worker_batch_words}={config.worker_batch_size}"
        )
    return problems


RULES = (
    async_pipeline,
    batch,
    proximal,
    vector_env,
    user_encoder,
    attention,
    recurrent,
    ready_envs,
    env_groups,
    rollout_compile,
    learner,
    league,
    agents,
    evaluation,
)


def problems_of(config) -> list[str]:
    """Every rule's problems with ``config``, topic by topic."""
    return [problem for rule in RULES for problem in rule(config)]
