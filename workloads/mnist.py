"""The SMDDP MNIST example's CNN trained with Lightning DDP on synthetic MNIST-shaped data.

Lightning's DDPStrategy runs with process_group_backend nccl (GPU) or gloo (CPU), taking ranks from
torchrun or OpenMPI through the same reader as the other workloads. Rank 0 prints one line per
epoch: `epoch E: loss X, accuracy Y` (mean training loss and validation accuracy over all ranks);
every rank prints the KT2T_STEP (one per batch) and KT2T_METRICS lines of workloads/metric_lines.py.
Run: torchrun --nproc_per_node=N -m workloads.mnist --size tiny
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import time
import warnings
from dataclasses import dataclass

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.environments import ClusterEnvironment
from lightning.pytorch.strategies import DDPStrategy
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from workloads.distributed import DistEnv, Session
from workloads.metric_lines import Reporter, params_checksum, say
from workloads.probe import COMPUTE_KEYS, compute_window
from workloads.program import new_parser, run_main, workload_main

NUM_CLASSES = 10


class Net(nn.Module):
    """The CNN of the SageMaker distributed data parallel (SMDDP) MNIST example, layer for layer."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = self.dropout2(F.relu(self.fc1(torch.flatten(x, 1))))
        return F.log_softmax(self.fc2(x), dim=1)


def synthetic_mnist(samples: int, seed: int) -> TensorDataset:
    """28x28 single-channel images: a fixed random template per class plus heavy noise.

    Learnable (so accuracy rises and loss falls from ln 10) yet not trivial, with no download.
    The templates come from a fixed seed so every split and every rank shares them.
    """
    templates = torch.randn(NUM_CLASSES, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, NUM_CLASSES, (samples,), generator=generator)
    images = 0.5 * templates[labels] + torch.randn(samples, 1, 28, 28, generator=generator)
    return TensorDataset(images, labels)


class KT2TEnvironment(ClusterEnvironment):
    """Hands Lightning the ranks our reader found (torchrun or OpenMPI), so one code path serves both
    launchers; Lightning's own detection knows torchrun but needs mpi4py for OpenMPI."""

    def __init__(self, denv: DistEnv) -> None:
        self._env = denv

    @property
    def creates_processes_externally(self) -> bool:
        return True  # torchrun or mpirun started us; Lightning must not spawn

    # Lightning reads these only to initialise the process group, which our session has done.
    @property
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        return int(os.environ.get("MASTER_PORT", "0"))

    @staticmethod
    def detect() -> bool:
        return True

    def world_size(self) -> int:
        return self._env.world_size

    def set_world_size(self, size: int) -> None:
        pass  # fixed by the launcher

    def global_rank(self) -> int:
        return self._env.rank

    def set_global_rank(self, rank: int) -> None:
        pass  # fixed by the launcher

    def local_rank(self) -> int:
        return self._env.local_rank

    def node_rank(self) -> int:
        return self._env.rank // self._env.local_world_size


def epoch_line(epoch: int, loss: float, accuracy: float) -> str:
    """Rank 0's line after each epoch: mean training loss and validation accuracy over all ranks."""
    return f"epoch {epoch}: loss {loss:.4f}, accuracy {accuracy:.4f}"


class MNISTModule(pl.LightningModule):
    def __init__(
        self, lr: float, gamma: float, reporter: Reporter, probe_batch: tuple[torch.Tensor, torch.Tensor]
    ) -> None:
        super().__init__()
        self.net = Net()
        self.lr = lr
        self.gamma = gamma
        self.reporter = reporter
        self.probe_batch = probe_batch
        self.compute: dict[str, float | int] = dict.fromkeys(COMPUTE_KEYS, float("nan"))
        self.steps_done = 0
        self.train_seconds = 0.0
        self.train_samples = 0
        self.last_accuracy = float("nan")
        self._batch_start = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, labels = batch
        loss = F.nll_loss(self(images), labels)
        self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        images, labels = batch
        output = self(images)
        accuracy = (output.argmax(dim=1) == labels).float().mean()
        self.log("val_loss", F.nll_loss(output, labels), sync_dist=True)
        self.log("val_accuracy", accuracy, sync_dist=True)

    def on_train_start(self) -> None:
        # The net's own forward+backward under the DDP wrapper's no_sync(): compute, no all-reduce.
        images, labels = (t.to(self.device) for t in self.probe_batch)
        self.reporter.steps_requested = int(self.trainer.estimated_stepping_batches)
        self.compute = compute_window(
            self.trainer.strategy.model, lambda: F.nll_loss(self.net(images), labels).backward(), self.device
        )

    def on_train_batch_start(self, batch: object, batch_idx: int) -> None:
        self._batch_start = time.perf_counter()

    def on_train_batch_end(self, outputs: dict[str, torch.Tensor], batch: object, batch_idx: int) -> None:
        seconds = time.perf_counter() - self._batch_start
        self.train_seconds += seconds
        self.train_samples += len(batch[1])  # type: ignore[index]
        self.reporter.step(self.steps_done, float(outputs["loss"].item()), seconds * 1000)
        self.steps_done += 1

    def on_train_epoch_end(self) -> None:
        # Runs after the epoch's validation, so both numbers are this epoch's, synced over ranks.
        metrics = self.trainer.callback_metrics
        self.last_accuracy = float(metrics["val_accuracy"])
        if self.trainer.is_global_zero:
            say(epoch_line(self.current_epoch, float(metrics["train_loss"]), self.last_accuracy))

    def configure_optimizers(self) -> dict[str, object]:
        # The example's optimiser and schedule: Adadelta lr 1.0, StepLR(step_size=1, gamma=0.7).
        optimizer = torch.optim.Adadelta(self.parameters(), lr=self.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=self.gamma)
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


@dataclass(frozen=True)
class MNISTSize:
    train_samples: int  # in total, split over ranks by Lightning's DistributedSampler
    val_samples: int
    epochs: int


SIZES = {"tiny": MNISTSize(2048, 512, 2), "full": MNISTSize(60000, 10000, 5)}  # full: MNIST's own split


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = new_parser("workloads.mnist", __doc__, precision=False)
    parser.add_argument("--size", choices=sorted(SIZES), default="full")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank (the example's 64)")
    parser.add_argument(
        "--batches-per-epoch", type=int, help="train on only this many batches per epoch and rank (default: all)"
    )
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    args.epochs = args.epochs or SIZES[args.size].epochs
    return args


def quiet_lightning() -> None:
    """Keep pod logs readable: no banner about TPUs/HPUs, no hints about DataLoader workers."""
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    logging.getLogger("lightning.fabric").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
    warnings.filterwarnings("ignore", message=r".*LeafSpec.*")


def train(args: argparse.Namespace, session: Session, reporter: Reporter) -> None:
    """Lightning fits inside our session: it finds the process group initialised and uses it."""
    denv, device = session.env, session.device
    quiet_lightning()
    pl.seed_everything(args.seed, verbose=False)
    size = SIZES[args.size]
    train_data = DataLoader(synthetic_mnist(size.train_samples, seed=1), batch_size=args.batch_size, shuffle=True)
    val = DataLoader(synthetic_mnist(size.val_samples, seed=2), batch_size=256)
    module = MNISTModule(args.lr, args.gamma, reporter, synthetic_mnist(args.batch_size, seed=3).tensors)
    trainer = pl.Trainer(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=denv.local_world_size,
        num_nodes=max(1, denv.world_size // denv.local_world_size),
        strategy=DDPStrategy(cluster_environment=KT2TEnvironment(denv), process_group_backend=session.backend),
        max_epochs=args.epochs,
        limit_train_batches=args.batches_per_epoch,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, train_data, val)
    reporter.finish(
        {
            "epochs": args.epochs,
            "loss_expected_first": math.log(NUM_CLASSES),
            "accuracy": module.last_accuracy,
            "samples_per_s": module.train_samples / module.train_seconds,
            **module.compute,
            "params_checksum": params_checksum(module.parameters()),
        }
    )


main = workload_main("mnist", parse_args, train)

if __name__ == "__main__":
    run_main("workloads.mnist", main)
