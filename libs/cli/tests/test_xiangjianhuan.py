"""The 相见欢 form check of the Song-lyrics demo (`loop_agents_cli.demos.xiangjianhuan`)."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from loop_agents import LoopContext
from loop_agents_cli.demos import song_lyrics
from loop_agents_cli.demos.prompts import prompt
from loop_agents_cli.demos.xiangjianhuan import check_xiangjianhuan, xiangjianhuan_form
from loop_agents_cli.models.settings import ModelSettings, SettingsError
from tests.scripted_openai import ScriptedOpenAI, Structured

REQUEST = HumanMessage("Write.")


def context(text: str) -> LoopContext:
    answer = AIMessage(text, id="a1")
    return {
        "iteration": 1,
        "init_messages": [REQUEST],
        "last_response": answer,
        "feedback": [],
        "messages": [REQUEST, answer],
    }


# -- the 相见欢 form ----------------------------------------------------------------------

# seed 000: three drafts with the form; the nine-character phrases break 6+3 with 、
SEED_000 = [
    "相见欢·淇水旧盟\n\n淇边初见春柔，柳丝稠。\n笑把青丝低绾、倚层楼。\n\n"
    "旧盟在，人空改，梦难留。\n一段伤心都付、晚来秋。\n",
    "相见欢·淇水遗情\n\n当年淇上相逢，语春风。\n误把深盟轻许、月明中。\n\n"
    "桑阴碧，人情易，恨无穷。\n一任残灯孤枕、听秋蛩。\n",
    "相见欢·淇岸秋思\n\n昔年携手河桥，雨初消。\n脉脉柔情曾向、柳边招。\n\n"
    "桑犹在，人空瘦，鬓先凋。\n回首旧盟如梦、暮云遥。\n",
]
# seed 001: two drafts whose nine-character phrases break 4+5
SEED_001 = [
    "【相见欢】  \n当年初见斜阳，过横塘。  \n一诺轻轻，笑语付疏妆。  \n\n"
    "桑叶落，心先薄，泪成行。  \n淇水汤汤，流尽旧时光。",
    "【相见欢】  \n当年一笑相逢。  \n过淇东。  \n布贸无非，来语问深衷。  \n\n"
    "秋已约，心难托，誓成空。  \n桑落人归，回首怨东风。",
]
LI_YU = "无言独上西楼，月如钩。寂寞梧桐深院锁清秋。剪不断，理还乱，是离愁。别是一般滋味在心头。"


@pytest.mark.parametrize("draft", SEED_000)
def test_seed_000_drafts_have_the_form(draft):
    report = check_xiangjianhuan(draft)
    assert report.ok, report.feedback
    assert report.characters == 36
    assert [len(p) for p in report.phrases] == [6, 3, 9, 3, 3, 3, 9]
    assert report.feedback.startswith("《相见欢》格式正确")


def test_li_yu_passes():
    report = check_xiangjianhuan(LI_YU)
    assert report.ok
    assert report.phrases == (
        "无言独上西楼",
        "月如钩",
        "寂寞梧桐深院锁清秋",
        "剪不断",
        "理还乱",
        "是离愁",
        "别是一般滋味在心头",
    )


@pytest.mark.parametrize(
    ("draft", "third", "seventh"),
    [
        (SEED_001[0], "一诺轻轻，笑语付疏妆", "淇水汤汤，流尽旧时光"),
        (SEED_001[1], "布贸无非，来语问深衷", "桑落人归，回首怨东风"),
    ],
)
def test_seed_001_drafts_break_their_nine_character_phrases_4_5(draft, third, seventh):
    report = check_xiangjianhuan(draft)
    assert not report.ok
    assert report.characters == 36  # the count is right; the breaks are not
    assert [(p.kind, p.phrase, p.text) for p in report.problems] == [
        ("break", 3, third),
        ("break", 7, seventh),
    ]
    assert report.layout == (("6", "3", "4+5"), ("3", "3", "3", "4+5"))
    lines = report.feedback.splitlines()
    assert lines[0].endswith("现为36字（上片6、3、4+5，下片3、3、3、4+5）。")
    assert lines[1].startswith(f"- 第3句（上片第3句，应为9字）断在第4字后（4+5）：“{third}”")
    assert "或在第6字后断开（6+3），如“笑把青丝低绾、倚层楼”" in lines[1]
    assert lines[2].startswith("- 第7句（下片第4句，应为9字）断在第4字后（4+5）")


def test_seed_001_draft_in_english():
    report = check_xiangjianhuan(SEED_001[0], language="en")
    assert report.problems[0].message.startswith(
        "Phrase 3 (stanza 1, phrase 3; 9 characters) breaks after its 4th character (4+5): "
        '"一诺轻轻，笑语付疏妆"; a nine-character phrase reads as one line or breaks after '
        "its 6th character (6+3)"
    )


def test_missing_phrase():
    report = check_xiangjianhuan(LI_YU.replace("月如钩。", ""))
    assert not report.ok
    assert report.characters == 33
    assert [(p.kind, p.phrase) for p in report.problems] == [("missing", 2)]
    assert report.problems[0].message == "第2句（上片第2句，应为3字）缺失，应在“无言独上西楼”之后。"
    assert report.phrases[1] == ""


def test_extra_character():
    report = check_xiangjianhuan(LI_YU.replace("在心头", "在心头里"))
    assert not report.ok
    assert report.characters == 37
    assert [(p.kind, p.phrase, p.text) for p in report.problems] == [
        ("length", 7, "别是一般滋味在心头里")
    ]
    assert "现为10字（多1字）" in report.problems[0].message


def test_extra_phrase_and_merged_phrases():
    report = check_xiangjianhuan(LI_YU.replace("是离愁。", "是离愁，泪难收。"))
    assert [(p.kind, p.text) for p in report.problems] == [("extra", "泪难收")]
    report = check_xiangjianhuan(LI_YU.replace("西楼，", "西楼"))
    assert [(p.kind, p.phrase, p.text) for p in report.problems] == [
        ("merged", 1, "无言独上西楼月如钩")
    ]
    assert "应按6、3字断开" in report.problems[0].message


def test_latin_letter_title_is_not_counted():
    draft = "Xiang Jian Huan: Vows by the Qi\n\n" + SEED_000[0].split("\n\n", 1)[1]
    assert check_xiangjianhuan(draft).ok
    assert check_xiangjianhuan("**Meeting Joy**\n" + LI_YU).ok


def test_latin_letters_in_the_verse_are_reported():
    report = check_xiangjianhuan(SEED_000[0] + "—— by GPT 5\n")
    assert [(p.kind, p.text) for p in report.problems] == [("foreign", "by GPT 5")]
    assert report.characters == 36


def test_a_long_answer_lists_a_bounded_number_of_problems():
    essay = LI_YU + "这首词写离愁，情景交融，余味无穷。" * 10
    report = check_xiangjianhuan(essay)
    assert len(report.problems) > 12
    lines = report.feedback.splitlines()
    assert len(lines) == 1 + 12 + 1
    assert lines[-1] == f"- ……另有{len(report.problems) - 12}处问题。"


def test_misplaced_stanza_break_and_empty_answer():
    report = check_xiangjianhuan(LI_YU.replace("月如钩。", "月如钩。\n\n"))
    assert [(p.kind, p.text) for p in report.problems] == [("stanza", "月如钩")]
    empty = check_xiangjianhuan("【相见欢】\n\n")
    assert not empty.ok
    assert [p.kind for p in empty.problems] == ["empty"]


def test_the_form_score_says_how_near_a_draft_is():
    assert check_xiangjianhuan(LI_YU).score == 100
    one = check_xiangjianhuan(LI_YU.replace("月如钩。", ""))  # a phrase missing
    two = check_xiangjianhuan(LI_YU.replace("月如钩。", "").replace("在心头", "在心头里"))
    assert (len(one.problems), len(two.problems)) == (1, 2)
    assert 75 > one.score > two.score > 0  # below the demo's pass mark, nearer is higher
    copy = check_xiangjianhuan(prompt)  # a copy of the source poem: far off, and still ranked
    assert 0 < copy.score < 1
    assert check_xiangjianhuan("【相见欢】\n\n").score == 0  # no verse


def test_form_evaluator():
    form = xiangjianhuan_form()
    assert form.invoke(context(LI_YU))["stop"] is True
    assert form.invoke(context(LI_YU))["score"] == 100
    verdict = form.invoke(context(SEED_001[0]))
    assert verdict["stop"] is False
    assert "断在第4字后（4+5）" in verdict["feedback"]
    english = xiangjianhuan_form(language="en").invoke(context(SEED_001[0]))
    assert "breaks after its 4th character (4+5)" in english["feedback"]


# -- the Song-lyrics demo with the form check ------------------------------------------------


@pytest.mark.parametrize("switch", ["option", "environment"])
async def test_demo_form_check_saves_the_reviewer_call(switch, monkeypatch):
    # draft 1 is malformed (seed 001); the form check sends it back without the reviewer
    server = ScriptedOpenAI(
        [SEED_001[0], SEED_000[0], Structured({"score": 81, "feedback": "清婉。"})]
    )
    settings = ModelSettings(api_key="sk-test", structured_output_method="function_calling")
    if switch == "environment":
        monkeypatch.setenv("LOOP_AGENTS_FORM_CHECK", "1")
        loop = song_lyrics.build_loop(settings, http_async_client=server.async_client())
    else:
        monkeypatch.delenv("LOOP_AGENTS_FORM_CHECK", raising=False)
        loop = song_lyrics.build_loop(
            settings, http_async_client=server.async_client(), form_check=True
        )
    message = HumanMessage(content="写一首相见欢。")
    result = await loop.ainvoke({"init_messages": [message], "messages": [message]})
    assert result["stop_reason"] == "accepted"
    assert len(server.requests) == 3  # composer, composer, reviewer: no review of draft 1
    assert "tools" in server.requests[2]  # the third request is the reviewer's
    assert result["feedback"][0].startswith("《相见欢》格式不合")
    assert "一诺轻轻，笑语付疏妆" in result["messages"][2].text
    assert [r["decided_by"] for r in result["records"]] == [
        ["xiangjianhuan_form"],  # the form check sent draft 1 back
        ["xiangjianhuan_form", "evaluate"],  # both accepted draft 2
    ]
    # draft 1's score says how near it is to the form (below the pass mark)
    assert [r["score"] for r in result["records"]] == [check_xiangjianhuan(SEED_001[0]).score, 81.0]


def test_demo_form_check_switch():
    assert song_lyrics.form_check_from_env({}) is True  # on unless turned off
    assert song_lyrics.form_check_from_env({"LOOP_AGENTS_FORM_CHECK": "Yes"}) is True
    assert song_lyrics.form_check_from_env({"LOOP_AGENTS_FORM_CHECK": "0"}) is False
    assert song_lyrics.form_check_from_env({"LOOP_AGENTS_FORM_CHECK": "no"}) is False
    with pytest.raises(SettingsError, match="LOOP_AGENTS_FORM_CHECK='maybe'"):
        song_lyrics.form_check_from_env({"LOOP_AGENTS_FORM_CHECK": "maybe"})


def test_the_form_check_states_its_criteria():
    assert "6, 3 and 9" in (xiangjianhuan_form(language="en").criteria or "")
