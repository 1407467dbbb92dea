"""The app's messages (app/messages.py): a burst of progress collapses into the newest report of the same request,
and nothing else is ever dropped."""

from memtui.app.messages import ByProgress, EstimateProgress, EstimateReady
from memtui.estimation.settings import Settings


def test_progress_messages_replace_each_other_only_for_the_same_request():
    a, b = Settings(metric="loglik"), Settings(metric="rank")
    assert EstimateProgress(a, 0.1, "bootstrap").can_replace(EstimateProgress(a, 0.2, "bootstrap"))
    assert not EstimateProgress(a, 0.1, "bootstrap").can_replace(EstimateProgress(b, 0.2, "bootstrap"))
    assert not EstimateProgress(a, 0.1, "bootstrap").can_replace(EstimateReady(a, 0, None, "failed"))
    assert not EstimateReady(a, 0, None, "x").can_replace(EstimateReady(a, 0, None, "y"))  # answers are all kept
    assert ByProgress((a, "g"), 0.1, "s").can_replace(ByProgress((a, "g"), 0.5, "s"))
    assert not ByProgress((a, "g"), 0.1, "s").can_replace(ByProgress((a, "h"), 0.5, "s"))
