import ast
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.rules.tokens import SimpleTokenCounter
from streams.summarizer.length import ELLIPSIS, cap_length
from streams.summarizer.summarizer import Summarizer

from .helpers import SESSION, ScriptedModel, rounds

PACKAGE = Path(__file__).resolve().parents[3] / "streams" / "summarizer"
ADAPTER_ONLY = ("openai", "faust", "aiokafka", "kafka", "cassandra", "httpx", "aiohttp")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_only_the_adapter_imports_io_libraries(path: Path) -> None:
    io = _imports(path) & set(ADAPTER_ONLY)
    if path.name == "openai_adapter.py":
        assert io == {"openai"}
    else:
        assert io == set(), f"{path.name} imports {io}"


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("Short.", 100, "Short."),
        ("One. Two three. Four five six.", 16, "One. Two three."),
        ("Version 3.5 is out. Next.", 12, "Version 3.5…"),
        ("no sentence end here at all", 14, "no sentence…"),
        ("Supercalifragilistic", 5, "Supe…"),
        ("Wait... what? Really!? Yes.", 22, "Wait... what? Really!?"),
        ('He said "stop." Then left.', 20, 'He said "stop."'),
        ("See example.com for v1.2 details", 20, "See example.com for…"),
        ("好的。下一步是部署。然后测试", 12, "好的。下一步是部署。"),
        ("彼は「はい。」と言った。次に", 10, "彼は「はい。」"),
        ("第一步完成！第二步？好", 10, "第一步完成！第二步？"),
        ("结论：我们使用 Python 3.12 版本进行开发和测试工作", 16, "结论：我们使用 Python…"),
        ("用户希望部署服务但还没有决定使用哪个云平台和数据库", 10, "用户希望部署服务但…"),
    ],
)
def test_cap_length_cuts_at_sentences_then_words_then_characters(text: str, limit: int, expected: str) -> None:
    capped = cap_length(text, limit)
    assert capped == expected
    assert len(capped) <= limit


def _cut_is_clean(text: str, capped: str) -> None:
    kept = capped.removesuffix(ELLIPSIS)
    assert kept and capped != ELLIPSIS
    assert text.startswith(kept)
    if len(kept) < len(text):
        follower = text[len(kept)]
        assert unicodedata.category(follower) not in ("Mn", "Mc", "Me"), (kept, follower)
        assert follower != "\u200d" and not kept.endswith("\u200d")


def test_a_chinese_answer_without_spaces_keeps_its_sentences() -> None:
    sentence = "用户要求在周五前完成数据迁移并保留所有历史记录。"  # 24 characters, no space
    answer = sentence * 30  # 720 characters
    capped = cap_length(answer, 600)
    assert capped == sentence * 25
    unpunctuated = answer.replace("。", "，")
    capped = cap_length(unpunctuated, 600)
    assert len(capped) == 600 and capped.endswith(ELLIPSIS) and unpunctuated.startswith(capped[:-1])


@pytest.mark.parametrize(
    "text",
    [
        "ภาษาไทยไม่มีการเว้นวรรคระหว่างคำที่นี่เลยนะครับผู้ใช้ต้องการสรุปที่ถูกต้อง" * 3,
        "Cafe\u0301 " * 40,
        "e\u0301\u0301\u0301" * 50,
        "👨\u200d👩\u200d👧\u200d👦" * 30,
        "🇯🇵🇨🇳🇹🇭" * 30,
        "👍🏽" * 60,
        "한국어 요약은 띄어쓰기가 있습니다 그러나 문장 끝이 없습니다" * 4,
    ],
)
@pytest.mark.parametrize("limit", [2, 3, 7, 31, 50, 101])
def test_a_cut_never_splits_a_character(text: str, limit: int) -> None:
    capped = cap_length(text, limit)
    _cut_is_clean(text, capped)
    if len(text) > limit:
        # Beyond the cap only when not even one character and the ellipsis fit: then one character, whole.
        assert len(capped) <= limit or ELLIPSIS not in capped


@given(st.text(min_size=1, max_size=300), st.integers(min_value=1, max_value=200))
@settings(max_examples=300, deadline=None)
def test_capped_text_with_content_is_never_empty_or_a_bare_ellipsis(text: str, limit: int) -> None:
    text = text.strip()
    capped = cap_length(text, limit)
    if text:
        # A text that starts with an ellipsis may keep just that: the text's own character, not a cut's marker.
        assert capped.strip() and (capped != ELLIPSIS or text.startswith(ELLIPSIS))
    assert text.startswith(capped.removesuffix(ELLIPSIS))


@pytest.mark.parametrize(
    "text",
    [
        unicodedata.normalize("NFD", "한국어요약입니다그러나문장끝이없습니다" * 3),
        unicodedata.normalize("NFD", "摘要：用户要한국어번역和中文对照P1没有空格") * 3,
        "\u1100\u1100\u1161\u11a8" * 20,  # old Hangul: two leading consonants in one syllable
    ],
    ids=["hangul", "hangul-and-chinese", "old-hangul"],
)
def test_a_cap_never_splits_a_decomposed_hangul_syllable(text: str) -> None:
    # The oracle reads nothing of the cut rule: whole syllables recompose (NFC) into a prefix
    # of the recomposed text; a syllable cut inside recomposes into another one, or a bare jamo.
    whole = unicodedata.normalize("NFC", text)
    for limit in range(2, 40):
        head = cap_length(text, limit).removesuffix(ELLIPSIS)
        assert text.startswith(head), limit
        assert whole.startswith(unicodedata.normalize("NFC", head)), (limit, head)


async def test_max_summary_length_keeps_decomposed_hangul_whole() -> None:
    answer = unicodedata.normalize("NFD", "요약P1한국어로답변합니다") * 4
    # A model that does not shorten when asked (the same answer twice): the cut rule applies.
    model = ScriptedModel(answer, answer)
    summarizer = Summarizer(model, max_summary_length=12, token_counter=SimpleTokenCounter())
    result = await summarizer.summarize("", rounds(1), session=SESSION)
    head = result.text.removesuffix(ELLIPSIS)
    assert head and unicodedata.normalize("NFC", answer).startswith(unicodedata.normalize("NFC", head))
