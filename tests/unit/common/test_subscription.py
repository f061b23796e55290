"""What a subscription declares: the classes it acts on, those it ignores, and nothing twice."""

from __future__ import annotations

import pytest

from lockstep_common.consumer import HandlerContext, On, OnBatch, Subscription
from lockstep_common.envelope import Envelope
from lockstep_common.events.v1 import BundleRejected, BundleSubmitted, InventoryObserved

pytestmark = pytest.mark.unit


async def _submitted(ctx: HandlerContext, env: Envelope[BundleSubmitted]) -> None:
    return None


async def _reports(ctx: HandlerContext, envs: list[Envelope[InventoryObserved]]) -> None:
    return None


def test_accepts_lists_the_handled_classes_then_the_ignored_ones() -> None:
    sub = Subscription(
        "s",
        "BUNDLES",
        ("bundle.>",),
        handlers=(On(BundleSubmitted, _submitted),),
        ignores=(BundleRejected,),
    )
    assert sub.handled == (BundleSubmitted,)
    assert sub.accepts == (BundleSubmitted, BundleRejected)


def test_a_batch_subscription_handles_its_one_class() -> None:
    sub = Subscription(
        "t", "TELEMETRY", ("telemetry.>",), batch=OnBatch(InventoryObserved, _reports)
    )
    assert sub.accepts == (InventoryObserved,)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {
            "handlers": (On(BundleSubmitted, _submitted),),
            "batch": OnBatch(InventoryObserved, _reports),
        },
    ],
    ids=["neither", "both"],
)
def test_exactly_one_of_handlers_and_batch(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="exactly one of handlers, batch"):
        Subscription("s", "BUNDLES", ("bundle.>",), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("handlers", "ignores"),
    [
        ((On(BundleSubmitted, _submitted), On(BundleSubmitted, _submitted)), ()),
        ((On(BundleSubmitted, _submitted),), (BundleSubmitted,)),
    ],
    ids=["handled twice", "handled and ignored"],
)
def test_a_class_is_declared_once(
    handlers: tuple[On[BundleSubmitted], ...], ignores: tuple[type[BundleSubmitted], ...]
) -> None:
    with pytest.raises(ValueError, match="declared twice"):
        Subscription("s", "BUNDLES", ("bundle.>",), handlers=handlers, ignores=ignores)
