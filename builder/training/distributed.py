"""One training run over several processes with torch.distributed (launched by torchrun), or over one.

    torchrun --nproc-per-node 2 -m onnxformer.cli.train gpt ...     (or: onnxformer train gpt --nproc 2)

Every process draws the same global batch from the shared seeded data generator and trains on its own
slice of rows (`shard`); BERT's masks are drawn with the batch, so they are sliced too. Each term of the
loss is divided by its count over the whole global batch and multiplied by the number of processes, so
DistributedDataParallel's gradient average equals the gradient of one process on the whole batch: two
processes at B/2 rows each train the same model as one at B. Dropout is seeded per process (rank).

Backends: gloo on CPU, NCCL on CUDA (one GPU per process, by LOCAL_RANK). With `fsdp=True` the model is
sharded with `torch.distributed.fsdp.fully_shard` and checkpointed as a full (unsharded) state dict.
Only rank 0 evaluates, plots and writes checkpoints; the others wait at a barrier.

`Context.close` frees the process group, joining gloo's threads, before the interpreter exits: a gloo
worker still finishing the last collective then (freeing its tensors takes the GIL) is ended by Python
with pthread_exit, and rank 0 aborted now and then ("terminate called without an active exception").
"""

import copy
import gc
import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from onnxformer.runtime.errors import ConfigError

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

TIMEOUT = timedelta(minutes=10)  # a rank that never arrives ends the run with an error, not a hang


@dataclass
class Context:
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")  # noqa: RUF009 - immutable
    owns_group: bool = False  # this run initialised the process group and destroys it at the end
    fsdp: bool = False
    mesh: "DeviceMesh | None" = field(default=None, repr=False)  # FSDP's device mesh, made by `wrap`

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def rows(self, batch_size: int) -> slice:
        if batch_size % self.world_size:
            raise ConfigError(
                f"batch_size {batch_size} does not split evenly over {self.world_size} processes; "
                f"give a multiple of {self.world_size}"
            )
        per = batch_size // self.world_size
        return slice(self.rank * per, (self.rank + 1) * per)

    def shard(self, batch: dict[str, torch.Tensor], batch_size: int) -> dict[str, torch.Tensor]:
        """This process's rows of the global batch, on its device."""
        rows = self.rows(batch_size)
        return {key: value[rows].to(self.device) for key, value in batch.items()}

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sum over the processes."""
        if not self.distributed:
            return values
        tensor = torch.tensor(values, dtype=torch.float64, device=self._collective_device())
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor.tolist()

    def broadcast(self, value: Any) -> Any:
        """Rank 0's value, on every process."""
        if not self.distributed:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, device=self._collective_device())
        return box[0]

    def gather(self, value: Any) -> list[Any]:
        """Every process's value, in rank order (on every process)."""
        if not self.distributed:
            return [value]
        box: list[Any] = [None] * self.world_size
        dist.all_gather_object(box, value)
        return box

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def _collective_device(self) -> torch.device:
        return self.device if dist.get_backend() == "nccl" else torch.device("cpu")

    def wrap(self, model: nn.Module) -> nn.Module:
        """The model to train: itself, in DistributedDataParallel, or sharded with fully_shard."""
        model.to(self.device)
        if not self.distributed:
            return model
        if self.fsdp:
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard

            self.mesh = init_device_mesh(self.device.type, (self.world_size,))
            fully_shard(model, mesh=self.mesh)  # shards `model` in place (and returns it, typed FSDPModule)
            return model
        ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(model, device_ids=ids)

    def full_state(self, model: nn.Module) -> dict[str, Any] | None:
        """The whole model's state dict on rank 0 (None elsewhere); every process must call it."""
        if self.fsdp and self.distributed:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            state = get_model_state_dict(model, options=options)
            return state if self.is_main else None
        return unwrap(model).state_dict() if self.is_main else None

    def full_optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> dict | None:
        if self.fsdp and self.distributed:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            state = get_optimizer_state_dict(model, optimizer, options=options)
            return state if self.is_main else None
        return optimizer.state_dict() if self.is_main else None

    def load_optimizer_state(self, model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """Every process loads the full optimizer state of a checkpoint."""
        if self.fsdp and self.distributed:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

            options = StateDictOptions(full_state_dict=True)
            set_optimizer_state_dict(model, optimizer, state, options=options)
        else:
            optimizer.load_state_dict(state)

    def close(self) -> None:
        """Leave the process group and free it, once the caller has let go of its models.

        destroy_process_group only forgets the group; the group and its threads go with the last
        reference to it. Left to the interpreter's exit, that is a race: a gloo worker thread that is
        still freeing the last collective's tensors needs the GIL, Python ends a thread that asks for it
        during finalisation with pthread_exit, and the unwinding through C++ calls std::terminate.
        Freed here, it must be freed without the GIL held, or that thread deadlocks with this one:
        DistributedDataParallel's C++ reducer frees it holding the GIL, while Python's reference to the
        group lets go of the GIL first. So a Python reference is held until everything else has let go.
        """
        if not (self.owns_group and dist.is_initialized()):
            return
        group = dist.group.WORLD
        dist.destroy_process_group()
        if self.mesh is not None:
            # DTensor's caches of sharding decisions keep the mesh (their keys hold it); the mesh must
            # not keep the group
            getattr(self.mesh, "_pg_registry", {}).clear()
            self.mesh = None
        for _ in range(4):  # models left in reference cycles let go of the group; freeing one can free more
            if not gc.collect():
                break
        del group  # the last reference: gloo's threads are joined now, with the GIL released


def unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def shadow_copy(model: nn.Module) -> nn.Module:
    """An unsharded copy on the CPU, for rank 0's evaluations and checkpoints under FSDP."""
    return copy.deepcopy(model).cpu()


def launched_world_size() -> int:
    """WORLD_SIZE as torchrun sets it (1 when not launched by torchrun)."""
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError:
        raise ConfigError(f"WORLD_SIZE={os.environ['WORLD_SIZE']!r} is not a whole number") from None


def context(device: str, *, fsdp: bool = False) -> Context:
    """This process's place in the run: joins torchrun's process group when WORLD_SIZE > 1."""
    world_size = launched_world_size()
    if world_size <= 1:
        if fsdp:
            raise ConfigError("fsdp shards a model over several processes; launch with --nproc 2 or more")
        return Context(device=torch.device(device))
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        if torch.cuda.device_count() <= local_rank:
            raise ConfigError(
                f"process {local_rank} has no GPU of its own ({torch.cuda.device_count()} visible); "
                "give --nproc no larger than the number of GPUs"
            )
        torch.cuda.set_device(local_rank)
        placed, backend = torch.device("cuda", local_rank), "nccl"
    else:
        placed, backend = torch.device("cpu"), "gloo"
    owns = not dist.is_initialized()
    if owns:
        _import_before_the_group()
        dist.init_process_group(backend=backend, timeout=TIMEOUT)
    return Context(rank, world_size, placed, owns_group=owns, fsdp=fsdp)


def _import_before_the_group() -> None:
    """Import the modules DDP's constructor imports, before the process group exists.

    torch.distributed.nn.functional evaluates `group=group.WORLD` as default arguments when it is first
    imported, and DistributedDataParallel imports it (through torch._dynamo). Imported after
    init_process_group, those defaults hold the group until the interpreter exits, out of reach of
    `Context.close`. Imported first, the defaults are None.
    """
    import importlib

    # torch._dynamo is what DistributedDataParallel's constructor imports, and it imports the other
    for name in ("torch._dynamo", "torch.distributed.nn.functional"):
        importlib.import_module(name)


def launch_command(nproc: int, module: str, args: list[str]) -> list[str]:
    """The torchrun (torch.distributed.run) command that runs `python -m module args` in `nproc`
    processes on this machine, talking over the loopback interface.

    `--standalone`: torchrun's own store listens on a port the kernel gives it (localhost:0), so two
    runs started at once cannot collide, as a port probed free and then bound by torchrun later can.
    """
    import sys

    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ConfigError(f"nproc must be a whole number >= 1, got {nproc!r}")
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes",
        "1",
        "--nproc-per-node",
        str(nproc),
        "-m",
        module,
        *args,
    ]
