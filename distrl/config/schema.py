"""The typed, frozen configuration of a distrl run.

Every section is a pydantic model that forbids unknown keys; a section's own rules are its validators, beside its
fields; rules across sections live in ``distrl/config/rules.py``, a function per topic, all run in one validation pass
so that it reports every problem.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from distrl.compile.backends import BACKENDS
from distrl.config.agents import AgentsConfig
from distrl.config.evaluation import EvalConfig
from distrl.config.league import LeagueConfig
from distrl.config.rules import problems_of

PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveFloat = Annotated[float, Field(gt=0)]
NonNegativeFloat = Annotated[float, Field(ge=0)]
UnitInterval = Annotated[float, Field(ge=0, le=1)]
ConvLayer = Annotated[list[PositiveInt], Field(min_length=3, max_length=3)]  # [channels, kernel, stride]


class Section(BaseModel):
    # allow_inf_nan=False: ppo.lr=.inf and the like train to NaN weights; refuse them here.
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True, allow_inf_nan=False)


class EnvConfig(Section):
    id: str = Field("CartPole-v1", description="gymnasium id, or 'package.module:factory' returning a gymnasium.Env")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the env constructor")
    num_envs_per_worker: PositiveInt = Field(
        64,
        description="copies of the env in each worker's vector env (of an N-agent env, copies with all their agents: "
        "each agent of each copy is a slot of the worker's batch)",
    )
    agents_per_copy: PositiveInt | None = Field(
        None,
        description="the agents of each env copy, the slots it fills: set by distrl from the env at start-up (a "
        "PettingZoo env's agent count, 1 for any other env) and saved with the run's config; null: not read yet",
    )
    vectorization: Literal["auto", "native", "sync", "async"] = Field(
        "auto",
        description="auto: native where the env has its own vector env and nothing rules it out (an env "
        "factory, action_repeat > 1), else sync (said at start-up); native: the env's own vector_entry_point; sync: "
        "an in-process loop; async: subprocesses",
    )
    action_repeat: PositiveInt = Field(1, description="repeat each action this many env steps, summing rewards")
    normalize_obs: bool = Field(
        False,
        description="running mean/std observation normalisation (the workers' "
        "statistics merged by the learner, kept in checkpoints, baked into exports)",
    )
    normalize_reward: bool = Field(
        False,
        description="divide rewards by the running standard deviation of each env's discounted return "
        "(gamma: ppo.gamma), as SB3's VecNormalize and CleanRL's NormalizeReward do for MuJoCo; "
        "the workers' statistics "
        "merged by the learner and kept in checkpoints; episode returns stay the env's own. ppo.reward_clip clips "
        "after",
    )
    max_consecutive_errors: PositiveInt = Field(
        3, description="an env copy whose step raises this many times in a row stops the run"
    )
    obs_clip: PositiveFloat = Field(10.0, description="clip normalised observations to [-obs_clip, obs_clip]")
    info_metrics: list[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]] = Field(
        default_factory=list,
        description="keys of the env's info read at each episode's end (e.g. [success, distance]): their mean, min "
        "and max over an iteration's finished episodes go beside the return (info_KEY_mean ...), in training and "
        "evaluation; episodes without the key are counted (info_KEY_missing)",
    )

    @property
    def agents_known(self) -> bool:
        """Whether the slots are known from the config alone: ``agents_per_copy`` read from the env, or an env id that
        names a single-agent env (a registered gymnasium id); a factory or a PettingZoo id may hold several agents."""
        return self.agents_per_copy is not None or not (":" in self.id or self.id.startswith("pettingzoo/"))

    @property
    def slots(self) -> int:
        """A worker's batch width: its env copies times their agents (the copies alone until the agents are read)."""
        return self.num_envs_per_worker * (self.agents_per_copy or 1)

    def describe_normalize(self) -> str:
        """What is normalised, in the words the start-up summary and ``distrl diagnose`` both use."""
        return (
            " + ".join(name for name, on in (("obs", self.normalize_obs), ("reward", self.normalize_reward)) if on)
            or "off"
        )


class ModelConfig(Section):
    type: Literal["mlp", "cnn", "attention"] = Field(
        "mlp",
        description="mlp for vector observations; cnn for image observations of 3 dims (uint8 pixels scaled by "
        "1/255, bool and float pixels as they are; model.conv_layers); attention: a transformer over the last "
        "model.window observations (or over observations that are already [tokens, features])",
    )
    encoder: str | None = Field(
        None,
        description="your own encoder, package.module:factory: factory(observation_space, **model.encoder_kwargs) "
        "returns a torch module from a batch of observations to features [B, F] (docs/models.md); distrl adds the "
        "heads, the LSTM core, the critic's copy, and builds no encoder of model.type's. It is code: imported only "
        "when named on the command line (--set model.encoder=ID, or --trust-model ID)",
    )
    encoder_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="keyword arguments for model.encoder's factory (YAML values)"
    )
    hidden: list[PositiveInt] = Field(
        default_factory=lambda: [64, 64],
        min_length=1,
        description="MLP layer widths; after model.conv_layers, the dense layers' widths",
    )
    conv_layers: list[ConvLayer] | None = Field(
        None,
        description="the convolutions of a cnn and of a Dict's image parts, [channels, kernel, stride] each (no "
        "padding, ReLU after each), then model.hidden's dense layers; unset: the Nature-CNN ([[32, 8, 4], [64, 4, "
        "2], [64, 3, 1]]) for images of 36 x 36 pixels or more, else [[16, 3, 2], [32, 3, 1]], either then one "
        "dense layer of model.hidden's last width",
    )
    channels: Literal["auto", "first", "last"] = Field(
        "auto",
        description="where image observations keep their channels: first [C, H, W] or last [H, W, C]; auto: read "
        "from the shape (its smallest axis, the first or the last, is the channels; refused where it cannot tell)",
    )

    activation: Literal["tanh", "relu", "elu", "gelu"] = "tanh"
    layer_norm: bool = Field(
        False,
        description="a LayerNorm after each dense layer, and over a vector observation's features before the first "
        "(MAPPO's feature normalisation and MLP layers); mlp and cnn models, and a Dict's parts",
    )
    shared_trunk: bool = Field(False, description="actor and critic share the encoder")
    lstm_size: NonNegativeInt = Field(
        0,
        description="LSTM core width after the encoder; 0 disables it. With shared_trunk: false the actor and the "
        "critic each have a core of this width (MAPPO's recurrent policy and critic)",
    )
    init_log_std: float = Field(0.0, description="initial log standard deviation of Gaussian (Box) policies")
    window: NonNegativeInt = Field(
        16,
        description="attention: observations each step attends over (the env's last ones, zeroed before its "
        "episode's start); 0: each observation is already a sequence [tokens, features]",
    )
    d_model: PositiveInt = Field(64, description="attention: token width")
    heads: PositiveInt = Field(4, description="attention: heads per layer (must divide d_model)")
    layers: PositiveInt = Field(2, description="attention: pre-norm transformer blocks")
    causal: bool = Field(False, description="attention: each token attends only to earlier ones")
    pool: Literal["last", "mean"] = Field("last", description="attention: the output is the last token's, or the mean")
    critic_parts: list[str] = Field(
        default_factory=lambda: ["critic"],
        description="parts of a Dict observation only the critic reads (an "
        "asymmetric actor-critic: privileged observations the policy acts without; Isaac Lab's 'critic' observation "
        "group; distrl's central critic, agents.critic); the actor reads the others. Needs shared_trunk: false",
    )

    @field_validator("encoder")
    @classmethod
    def _encoder_form(cls, value: str | None) -> str | None:
        module, _, name = (value or "").partition(":")
        if value is not None and not (all(part.isidentifier() for part in module.split(".")) and name.isidentifier()):
            raise ValueError(f"model.encoder={value!r}: give package.module:factory (a module path, a colon, a name)")
        return value

    @field_validator("conv_layers", mode="before")
    @classmethod
    def _conv_layers_form(cls, value: Any) -> Any:
        """Each layer three whole numbers above 0, said in one line naming the form (pydantic's own names an item)."""
        is_count = lambda x: isinstance(x, int) and not isinstance(x, bool) and x > 0  # noqa: E731
        if value is not None and not (
            isinstance(value, list)
            and value
            and all(isinstance(layer, list) and len(layer) == 3 and all(map(is_count, layer)) for layer in value)
        ):
            raise ValueError(
                f"model.conv_layers={value!r}: a list of layers, each [channels, kernel, stride] (3 whole numbers "
                "above 0), e.g. [[16, 3, 1]]; or null for the default"
            )
        return value

    def describe_layers(self, parameters: int | None = None) -> str:
        """The encoder in the words of the start-up summary and setup.txt, e.g. "mlp [64, 64] relu, layer norm", or
        "encoder my_module:factory (12,416 parameters)" for a user's (``parameters``: its count, where known)."""
        if self.encoder is not None:
            kwargs = f" {self.encoder_kwargs}" if self.encoder_kwargs else ""
            counted = f" ({parameters:,} parameters)" if parameters is not None else ""
            return f"encoder {self.encoder}{kwargs}{counted}"
        return f"{self.type} {self.hidden} {self.activation}" + (", layer norm" if self.layer_norm else "")

    def describe_lstm(self) -> str:
        """The LSTM core in the words of the start-up summary and setup.txt ("" without one)."""
        if not self.lstm_size:
            return ""
        return f"lstm {self.lstm_size}" + ("" if self.shared_trunk else " in each tower")


WORKER_BACKENDS = tuple(BACKENDS)  # the worker backends' table (distrl/compile/backends/__init__.py)
WorkerBackend = Literal[WORKER_BACKENDS]  # type: ignore[valid-type]
# rollout.samples_per_update auto never trains an update on fewer minibatches than this (CleanRL's num_minibatches):
# an update of one minibatch learns less per env step (docs/performance.md, the async section).
MIN_MINIBATCHES = 4
LEARNER_BACKENDS = ("auto", "eager", "inductor")  # the learner's loss: eager kernels, inductor's, or the faster
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def count_or_auto(value: Any) -> bool:
    """Whether ``value`` is ``auto`` or a whole number, 1 or more (a bool is not one): what the ``N | auto`` settings
    check before pydantic, so that a bad value gets one line (a plain union reports each member's failure)."""
    return value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)


def compile_short_form(value: Any, backends: tuple[str, ...]) -> Any:
    """Accept the forms RL-Games users write: ``true``/``false``, a mode name, or a backend name."""
    if isinstance(value, bool):
        return {"backend": "inductor" if value else "eager"}
    if isinstance(value, str):
        if value in COMPILE_MODES:
            return {"backend": "inductor", "mode": value}
        if value in backends:
            return {"backend": value}
        raise ValueError(
            f"compile={value!r}: expected true/false, a mode ({', '.join(COMPILE_MODES)}) or a backend "
            f"({', '.join(backends)})"
        )
    return value


class RolloutCompileConfig(Section):
    backend: WorkerBackend = Field(
        "onnxrt",
        description="policy backend of rollout workers: "
        + "; ".join(f"{spec.name}: {spec.summary}" for spec in BACKENDS.values())
        + ". Default onnxrt: in fp32 the fastest, or within 15 % of the fastest, in every measurement in "
        "docs/performance.md (MLP, LSTM, CNN; 2-core AMD and 16-core Xeon) and ready in under a second; on a CPU with "
        "bf16 instructions inductor in bf16 beat it on the Nature-CNN from 32 observations a call (docs/compile.md); "
        "auto measures each backend on this machine at start-up, paying inductor's compile (tens of seconds on a "
        "many-core machine)",
    )
    mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = Field(
        "default", description="torch.compile mode for inductor; ignored with a warning elsewhere"
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="backend options: " + "; ".join(f"{s.name}: {s.options}" for s in BACKENDS.values() if s.options),
    )
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto",
        description="the policy's forward on backends that run torch kernels (eager, inductor, ipex): bf16 "
        "under CPU autocast (oneDNN's AMX or AVX512-BF16 kernels), checked against eager fp32 within bf16's rounding; "
        "auto: fp32 and bf16 both built, checked and timed on a CPU with bf16 instructions (the faster kept), fp32 "
        "elsewhere. onnxrt runs fp32 (no bf16 kernel for these CPUs)",
    )
    memory_format: Literal["auto", "channels_last", "contiguous"] = Field(
        "auto",
        description="layout of a convolutional policy on backends that run torch kernels: channels_last "
        "(NHWC, oneDNN's own) or contiguous (NCHW); auto: channels_last in bf16, where it measured faster, contiguous "
        "in fp32, where it did not (docs/compile.md). onnxrt lays out its own kernels",
    )
    strict: bool = Field(False, description="a compile failure or mismatch is an error instead of a fallback to eager")
    verify_every_sync: bool = Field(
        True,
        description="after each weight sync, check the compiled policy against eager on the last observations "
        "(an onnxrt worker: on the build check's inputs, against eager's answers the learner sends with the weights, "
        "so it needs no torch; with a convolutional model against its own eager model, docs/compile.md)",
    )


class LearnerCompileConfig(Section):
    backend: Literal["auto", "eager", "inductor"] = Field(
        "auto",
        description="the learner's forward, loss and backward: eager kernels, or compiled by inductor "
        "(torch.compile; fused elementwise chains); auto: both timed on the first update where compiling pays (the "
        "device step on CUDA; a convolutional model on CPU), the faster kept if it matches the eager loop, eager "
        "elsewhere",
    )
    mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] = "default"
    critic_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] | None = Field(
        None, description="a separate mode for the critic tower (model.shared_trunk: false)"
    )


class WorkerRange(Section):
    min: PositiveInt = Field(
        ...,
        description="the run needs this many workers; with fewer for longer than "
        "rollout.min_workers_wait_s it stops (checkpoint, summary)",
    )
    max: PositiveInt = Field(
        ...,
        description="workers the run asks Ray for: those that do not fit yet start when "
        "a node with room joins (an autoscaler sees them as demand)",
    )


class RolloutConfig(Section):
    compile: RolloutCompileConfig = RolloutCompileConfig()
    num_workers: PositiveInt | WorkerRange = Field(
        1,
        description="rollout workers: a number, or a range {min, max} (pipeline async): the run starts once min "
        "are up, grows to max as nodes with room join, and goes on while min or more answer",
    )
    min_workers_wait_s: PositiveFloat = Field(
        300.0, description="a worker range: how long the run goes on with fewer than min workers before it stops"
    )
    num_cpus_per_worker: PositiveFloat = 1.0
    num_gpus_per_worker: NonNegativeFloat = Field(
        0.0,
        description="a GPU share per worker (a fraction: several workers share one GPU), for its policy on the "
        "GPU (rollout.compile.backend: cuda, or auto, which times it beside the CPU backends); 0: CPU inference",
    )
    rollout_length: PositiveInt = Field(128, description="env steps per env in one batch")
    pipeline: Literal["sync", "overlap", "async"] = Field(
        "sync",
        description="sync: rounds of every worker's batch, on-policy; overlap: the same rounds, workers sample "
        "round k+1 while the learner updates on k (policy lag 1); async: every worker samples continuously and the "
        "learner updates on whichever batches are in (no worker waits for another)",
    )
    env_groups: PositiveInt | Literal["auto"] = Field(
        "auto",
        description="a worker's env copies in this many groups, each a vector env of its own (Sample Factory's "
        "worker_num_splits): while one group's envs step, the policy acts for another's, so the env's time and the "
        "policy's overlap instead of adding up; must divide env.num_envs_per_worker; 1: step, act, step; auto: 2 where "
        "the env steps outside Python's lock (ale-py's native vector env, env.vectorization async) and the pipeline is "
        "sync (its learner idles while workers sample), else 1",
    )
    ready_envs: NonNegativeInt = Field(
        0,
        description="act on a worker's env copies as they become ready: the env steps every copy in its own threads "
        "and returns the first this many whose step is done, the policy acts for them while the rest step (EnvPool's "
        "and "
        "ale-py's batch_size), so no copy waits for the slowest; each copy's column of the batch fills at its own pace "
        "(one running ahead begins the next batch's). Needs ale-py's native vector env (an ALE/ id), no attention "
        "window; "
        "fewer than env.num_envs_per_worker; 0: every copy steps together (rollout.env_groups applies)",
    )
    max_policy_lag: NonNegativeInt = Field(
        4,
        description="async: a step that acted with weights more than this many versions behind the learner at its "
        "update is left out of it (stale_steps); a batch with no newer step is dropped (stale_batches)",
    )
    samples_per_update: PositiveInt | Literal["auto"] | None = Field(
        None,
        description="async: transitions per update, from whichever workers delivered them (a multiple of one "
        "worker's batch, env.num_envs_per_worker x rollout.rollout_length); null: a sync round's batch (every "
        "worker's); auto: as many workers' batches as their cores sample at once, ceil(num_workers x "
        "num_cpus_per_worker), and at least four minibatches' worth, up to a round: workers that share a "
        "core deliver one after another, and an update on each delivery trains on fresher data (configs/pendulum.yaml "
        "takes it; measured in docs/performance.md, where it also shows why it is not the default)",
    )
    updates_ahead: NonNegativeFloat = Field(
        1,
        description="async: updates' worth of batches the workers sample while the learner updates (whole batches, "
        "rounded down), then wait for it: 1 keeps every batch at most one version old at its update (policy lag <= 1); "
        "0.5 samples half the next update's batches during the update and half after it (lag ~0.5, where the learner "
        "is the slower side); 2 keeps workers busy where they share cores with the learner (more env steps/s, lag ~2)",
    )
    max_restarts: NonNegativeInt = Field(
        3,
        description="times a worker is restarted after its process dies (its sample is retried) or it times out; then "
        "the run stops (async: goes on without it). A restart because its node was lost spends none",
    )
    sample_timeout_s: PositiveFloat | Literal["auto"] = Field(
        "auto",
        description="a worker whose sample takes longer is killed and restarted, and the iteration goes on without its "
        "batch (worker_timeouts); auto: 10x the slowest recent sample, at least 60 s (120 s for the first)",
    )
    worker_niceness: int = Field(
        0,
        ge=0,
        le=19,
        description="the rollout workers' processes run this much nicer than the learner (Ray starts "
        "both at 15; at most 19): where they share its cores, the learner runs first and they take what it leaves; "
        "0: the same priority",
    )
    resources: dict[str, NonNegativeFloat] = Field(default_factory=dict, description="custom Ray resources per worker")
    node_labels: dict[str, str] = Field(default_factory=dict, description="Ray node labels a worker's node must have")

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_short_form(cls, value: Any) -> Any:
        return compile_short_form(value, WORKER_BACKENDS)

    @field_validator("samples_per_update", mode="before")
    @classmethod
    def _samples_or_auto(cls, value: Any) -> Any:
        """One line for any form (a plain union would report each member's failure)."""
        if value is None or count_or_auto(value):
            return value
        raise ValueError(
            f"rollout.samples_per_update={value!r}: must be a whole number of transitions (a multiple of "
            "one worker's batch), auto or null"
        )

    @field_validator("env_groups", mode="before")
    @classmethod
    def _groups_or_auto(cls, value: Any) -> Any:
        """One line for either form (a plain union would report the number's failure and the literal's both)."""
        if count_or_auto(value):
            return value
        raise ValueError(f"rollout.env_groups={value!r}: must be a whole number of groups, 1 or more, or auto")

    @field_validator("num_workers", mode="before")
    @classmethod
    def _worker_count_or_range(cls, value: Any) -> Any:
        """One line for either form (a plain union would report a failed count and a failed range both)."""
        if isinstance(value, WorkerRange):
            return value
        if isinstance(value, dict):
            try:
                return WorkerRange(**value)
            except ValidationError as exc:
                problem = exc.errors()[0]
                raise ValueError(
                    f"rollout.num_workers={value!r}: a range is {{min: N, max: M}} of positive integers "
                    f"({'.'.join(map(str, problem['loc']))}: {problem['msg']})"
                ) from None
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(
                f"rollout.num_workers={value!r}: Input should be a valid integer, or a range {{min: N, max: M}}"
            )
        if value < 1:
            raise ValueError(f"rollout.num_workers={value!r}: Input should be greater than 0")
        return value

    @property
    def max_workers(self) -> int:
        """Worker actors the run creates (a fixed count, or a range's max)."""
        return self.num_workers if isinstance(self.num_workers, int) else self.num_workers.max

    @property
    def min_workers(self) -> int:
        """Workers the run needs (a fixed count, or a range's min)."""
        return self.num_workers if isinstance(self.num_workers, int) else self.num_workers.min

    def describe_workers(self) -> str:
        return (
            str(self.num_workers)
            if isinstance(self.num_workers, int)
            else f"{self.num_workers.min}-{self.num_workers.max}"
        )


class LearnerConfig(Section):
    num_learners: PositiveInt = 1
    num_gpus_per_learner: NonNegativeFloat = 0.0
    num_cpus_per_learner: PositiveFloat = 1.0
    num_threads: PositiveInt | Literal["auto"] = Field(
        "auto",
        description="torch's CPU threads in a learner; auto: its CPUs (num_cpus_per_learner), and on a CPU "
        "learner of a convolutional model in a sync or overlap run also the workers' CPUs, which wait for its weights "
        "while it updates (up to the cores of its machine; one learner, no reserve_cores)",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto: cuda when the learner has a GPU, else cpu"
    )
    resources: dict[str, NonNegativeFloat] = Field(default_factory=dict, description="custom Ray resources per learner")
    node_labels: dict[str, str] = Field(default_factory=dict, description="Ray node labels a learner's node must have")
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = Field(
        "PACK", description="how the learners' placement group spreads them over nodes"
    )
    max_restarts: NonNegativeInt = Field(
        3, description="times dead learners are rebuilt from the newest state and their update run again"
    )
    snapshot_every_s: NonNegativeFloat = Field(
        0.0,
        description="how often learner-0 sends its full state (weights and the optimizer's moments) to the driver, "
        "which rebuilds a dead learner from the newest it holds; 0: after every update, so a rebuilt learner loses "
        "nothing; N: at most every N seconds (and with each checkpoint), so a rebuilt learner loses the updates "
        "since, at most N seconds of them",
    )
    update_timeout_s: PositiveFloat | Literal["auto"] = Field(
        "auto",
        description="an update that takes longer counts as a dead learner (rebuilt, the update run again); auto: 10x "
        "the slowest recent update, at least 120 s (900 s for the first, which compiles)",
    )
    step: Literal["auto", "device", "loop"] = Field(
        "auto",
        description="device: each minibatch step as one function over static buffers with no host synchronisation, "
        "captured as a CUDA graph on CUDA (uncaptured on CPU); loop: the plain loop; auto: device on CUDA where it "
        "applies (not recurrent, one learner, no fp16 scaler, no compile mode with CUDA graphs of its own), the loop "
        "elsewhere (on CPU "
        "the two measured the same)",
    )
    step_strict: bool = Field(
        False,
        description="the device step's first update is checked against the loop's on the same minibatches; "
        "true: a capture that raises or a result that differs is an error instead of a fallback to the loop",
    )
    reserve_cores: bool = Field(
        False,
        description="each learner process runs on ceil(num_cpus_per_learner) cores of its machine (CPU affinity) "
        "that the run's rollout workers there leave to it while it updates, using every core between updates: for "
        "pipeline async (or overlap) where workers share the learner's machine (sync's never sample during an update)",
    )
    compile: LearnerCompileConfig = LearnerCompileConfig()
    amp: Literal["auto", "off", "bf16", "fp16"] = Field(
        "auto",
        description="autocast dtype of the forward (the policy and value heads and the loss stay fp32); fp16 adds a "
        "gradient scaler; bf16 and auto are checked on the first update against the fp32 loop; auto: fp32 and bf16 "
        "timed on the first update on a CPU with bf16 instructions (AMX, AVX512-BF16) for a convolutional model or "
        "one with a linear layer of 256 x 256 weights or more (no LSTM), fp32 elsewhere",
    )
    memory_format: Literal["auto", "channels_last", "contiguous"] = Field(
        "auto",
        description="how a convolutional model's images and weights lie in memory on the learner: "
        "channels_last (NHWC: oneDNN's and cuDNN's own layout, so no conversion around each convolution) or "
        "contiguous (NCHW, PyTorch's default); auto: channels_last for a model with convolutions on a CPU learner "
        "(a Nature-CNN minibatch step took half the time), contiguous elsewhere; results agree within float tolerance",
    )

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_short_form(cls, value: Any) -> Any:
        return compile_short_form(value, LEARNER_BACKENDS)

    @field_validator("amp", mode="before")
    @classmethod
    def _amp_bool(cls, value: Any) -> Any:
        return "off" if value is False else value  # YAML reads a bare `off` as false

    @field_validator("num_threads", mode="before")
    @classmethod
    def _threads_or_auto(cls, value: Any) -> Any:
        if count_or_auto(value):
            return value
        raise ValueError(f"learner.num_threads={value!r}: a whole number of threads, 1 or more, or auto")


# The algorithms' table: one row each, the name of its folder distrl/algo/NAME/ (distrl/algo/base.py) and what it is.
ALGORITHMS = {
    "ppo": "PPO: the clipped surrogate on GAE advantages (Schulman et al. 2017); settings in the ppo section",
    "appo": "APPO: PPO's loss on V-trace targets (Espeholt et al. 2018), for the off-policy batches of pipeline async; "
    "the ppo section's settings, V-trace's clips in the appo section",
}


class PPOConfig(Section):
    lr: PositiveFloat = 2.5e-4
    anneal_lr: bool = Field(True, description="decay the learning rate linearly to 0 at stop.env_steps")
    gamma: UnitInterval = 0.99
    gae_lambda: UnitInterval = 0.95
    clip_coef: PositiveFloat = 0.2
    clip_vloss: bool = True
    vf_coef: NonNegativeFloat = 0.5
    ent_coef: NonNegativeFloat = 0.0
    max_grad_norm: PositiveFloat = 0.5
    epochs: PositiveInt = 4
    minibatch_size: PositiveInt = Field(2048, description="samples per gradient step (summed over learners)")
    norm_adv: bool = True
    target_kl: PositiveFloat | None = Field(None, description="stop the epoch loop once approx_kl exceeds this")
    reward_scale: PositiveFloat = 1.0
    reward_clip: PositiveFloat | None = None
    seq_len: PositiveInt = Field(16, description="BPTT chunk length for LSTM models")
    proximal: Literal["auto", "behaviour", "learner"] = Field(
        "auto",
        description="the policy the clipped ratio is measured from: behaviour (the one that acted; "
        "Schulman et al.) or learner (the learner's at the update's start: decoupled PPO, Hilton et al. 2022, one "
        "forward pass over the batch per update, which gives the values too), so a batch sampled a few versions back "
        "does not start its update clipped (pipeline overlap, async); auto: learner under pipeline async, where "
        "every batch is lagged (measured: docs/performance.md), behaviour otherwise",
    )
    behaviour_weight_clip: PositiveFloat | None = Field(
        None,
        description="with proximal: learner (algo: ppo), weight each sample's clipped surrogate by pi_learner / "
        "pi_behaviour (the decoupled objective's importance weight, Hilton et al. 2022), capped at this (RLlib's APPO "
        "caps its at 2) and divided by the batch's mean weight; None: unweighted, each lagged sample counted as if the "
        "learner's policy had acted (not baseline-invariant; faster on CartPole, and async Acrobot's exploration can "
        "collapse before any reward: docs/configs.md)",
    )
    normalize_value: bool = Field(
        False,
        description="the critic learns its targets normalised by their running mean and variance, kept by the "
        "learner (rl_games' normalize_value, MAPPO's ValueNorm); the values recorded at sampling are de-normalised "
        "for GAE and V-trace; the model's value output is in the normalised scale",
    )
    value_loss: Literal["mse", "huber"] = Field(
        "mse", description="the value loss: mse (0.5 x the squared error) or huber (MAPPO's, with huber_delta)"
    )
    huber_delta: PositiveFloat = Field(
        10.0, description="value_loss: huber: the error beyond which the loss grows linearly (MAPPO's 10)"
    )


class APPOConfig(Section):
    rho_bar: PositiveFloat = Field(1.0, description="V-trace: clip of the importance ratio in each TD error (rho-bar)")
    c_bar: PositiveFloat = Field(
        1.0,
        description="V-trace: clip of the ratio in the trace cut (c-bar); with ratio 1, "
        "rho_bar and c_bar >= 1, V-trace is GAE",
    )


class StopConfig(Section):
    env_steps: PositiveInt | None = 1_000_000
    time_s: PositiveFloat | None = None
    episode_return_mean: float | None = Field(None, description="mean over the last 100 episodes")
    eval_return_mean: float | None = Field(
        None, description="an evaluation's mean return (the eval section; a league run: its mean result, 1 a win)"
    )

    @model_validator(mode="after")
    def _some_condition(self) -> StopConfig:
        if all(v is None for v in (self.env_steps, self.time_s, self.episode_return_mean, self.eval_return_mean)):
            raise ValueError(
                "stop.env_steps=null, stop.time_s=null, stop.episode_return_mean=null, stop.eval_return_mean=null: "
                "set at least one stop condition"
            )
        return self


class CheckpointConfig(Section):
    every_iterations: NonNegativeInt = Field(10, description="0 writes only the final checkpoint")
    keep: PositiveInt = Field(3, description="newest checkpoints kept on disk")


class ClusterConfig(Section):
    placement_timeout_s: PositiveFloat = Field(
        600.0, description="how long to wait for an autoscaling cluster to provide the requested resources"
    )


class StorageConfig(Section):
    uri: str | None = Field(
        None,
        description="mirror each run to URI/RUN_NAME (a path, s3://, gs://: anything pyarrow.fs opens) so results "
        "outlive the machine; --storage sets it",
    )


class WandbConfig(Section):
    project: str = Field(..., min_length=1, description="the W&B project to log to")
    entity: str | None = Field(None, description="team or user (default: the logged-in user's)")
    mode: Literal["online", "offline", "disabled"] = Field(
        "online", description="offline: write the run under RUN_DIR/wandb for `wandb sync` later, no network"
    )
    group: str | None = Field(None, description="W&B group, e.g. a sweep or an experiment name")
    tags: list[str] = Field(default_factory=list)


class LoggingConfig(Section):
    tensorboard: bool = Field(
        True, description="TensorBoard scalars in the run directory, grouped rollout/ train/ perf/ compile/ faults/"
    )
    wandb: WandbConfig | None = Field(None, description="Weights & Biases logging (pip install 'distrl[wandb]')")
    video_every_iterations: NonNegativeInt = Field(
        0, description="record one episode with the newest weights every this many iterations to RUN_DIR/videos; 0: off"
    )
    progress: Literal["auto", "bar", "lines", "off"] = Field(
        "auto", description="auto: a live bar on a terminal, a line every few seconds otherwise"
    )
    log_every_s: PositiveFloat = 5.0


class Config(Section):
    env: EnvConfig = EnvConfig()
    model: ModelConfig = ModelConfig()
    rollout: RolloutConfig = RolloutConfig()
    learner: LearnerConfig = LearnerConfig()
    algo: Literal[tuple(ALGORITHMS)] = Field(  # type: ignore[valid-type]
        "ppo", description="the learner's algorithm: " + "; ".join(f"{k}: {v}" for k, v in ALGORITHMS.items())
    )
    ppo: PPOConfig = PPOConfig()
    appo: APPOConfig = APPOConfig()
    stop: StopConfig = StopConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    logging: LoggingConfig = LoggingConfig()
    cluster: ClusterConfig = ClusterConfig()
    storage: StorageConfig = StorageConfig()
    league: LeagueConfig | None = Field(
        None,
        description="self-play: train on a two-player game against a league of snapshots and baselines "
        "(docs/league.md); env.id then names the game",
    )
    agents: AgentsConfig = Field(AgentsConfig(), description="a multi-agent env's policies (docs/multiagent.md)")
    eval: EvalConfig = Field(
        EvalConfig(), description="evaluation during training and the best checkpoint it chooses (docs/usage.md)"
    )
    seed: NonNegativeInt = 0

    @property
    def worker_batch_size(self) -> int:
        """Transitions in one worker's batch: its slots (env copies x agents) times the rollout length."""
        return self.env.slots * self.rollout.rollout_length

    @property
    def worker_batch_words(self) -> str:
        """``worker_batch_size`` as the keys that make it, for messages."""
        agents = "*env.agents_per_copy" if (self.env.agents_per_copy or 1) > 1 else ""
        return f"env.num_envs_per_worker{agents}*rollout.rollout_length"

    @property
    def batch_size(self) -> int:
        """Transitions in one sync round, summed over workers (a worker range's min)."""
        return self.rollout.min_workers * self.worker_batch_size

    @property
    def batches_per_update(self) -> int:
        """Workers' batches in one update (``update_size`` is a whole number of them)."""
        return self.update_size // self.worker_batch_size

    @property
    def proximal(self) -> Literal["behaviour", "learner"]:
        """``ppo.proximal`` as the run uses it: ``auto`` is ``learner`` under pipeline async, ``behaviour``
        otherwise."""
        if self.ppo.proximal != "auto":
            return self.ppo.proximal
        return "learner" if self.rollout.pipeline == "async" else "behaviour"

    @property
    def update_size(self) -> int:
        """Transitions in one update: a round's (sync, overlap), or ``rollout.samples_per_update`` (async)."""
        chosen = self.rollout.samples_per_update
        if self.rollout.pipeline != "async" or chosen is None:
            return self.batch_size
        if chosen != "auto":
            return chosen
        # As many batches as the workers' cores sample at once: more would wait for workers that share a core (their
        # batches come one after another, so the first ones would be a version older by the update), fewer would
        # park workers that could sample.
        at_once = max(1, math.ceil(self.rollout.min_workers * self.rollout.num_cpus_per_worker - 1e-9))
        for batches in range(at_once, self.rollout.min_workers + 1):
            size = batches * self.worker_batch_size
            if size % self.ppo.minibatch_size == 0 and size >= MIN_MINIBATCHES * self.ppo.minibatch_size:
                return size
        return self.batch_size  # no fewer whole batches fit the minibatch: a round, which the checks below judge

    @model_validator(mode="after")
    def _check_combinations(self) -> Config:
        """The cross-field rules, topic by topic (``distrl/config/rules.py``): every problem in one pass."""
        problems = problems_of(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self
