"""A Chinese conversation asks for its memories: dialogue-length queries (two speakers, several
lines, most of the words generic) over memories written the way a memory manager writes them, one
fact each, plus two long "hub" memories made of nothing but generic words. Real jieba, real
embedder, real ranking: the memory a dialogue is about is among memory_search's first two (first
two, not first: 膝盖 in the dialogue is 右膝 in the memory, a word form jieba does not join, and
a store of two dozen memories gives 觉得 the idf of a rare word), the others it draws on are in the
top five, the hubs never lead, and the per-turn block carries it too. Chinese has no development set in ../shared/bench, so this is the
guard that the Chinese path (segmentation, stop words, literal runs, cosine floor) keeps working.
"""

import pytest

from injection.services.context import t1_select
from memory.search import memory_search

MEMORIES = {
    "run": "用户每周三和周六早上在滨江公园跑步，目标是明年三月完成第一个半程马拉松。",
    "knee": "用户去年冬天跑步时右膝受伤，医生建议每次跑前做十分钟热身并控制配速。",
    "cat": "用户养了一只叫“橘子”的橘猫，三岁，最近食欲不好，上周带它去看了兽医。",
    "catfood": "兽医建议橘子换成低脂猫粮，并且每天分三次少量喂食。",
    "job": "用户在一家做新能源汽车电池的公司担任软件工程师，负责电池管理系统的固件。",
    "promo": "用户正在准备下个月的晋升答辩，需要讲清楚自己主导的充电算法优化项目。",
    "mom": "用户的母亲住在成都，患有高血压，用户每个周日晚上都会给她打视频电话。",
    "trip": "用户计划十月国庆假期和女朋友小雨去云南大理和丽江自由行，预算一万元左右。",
    "visa": "用户的护照明年六月到期，打算去日本之前先去出入境管理局换发新护照。",
    "japan": "用户想在明年樱花季去京都和大阪旅行，特别想去伏见稻荷大社。",
    "guitar": "用户半年前开始自学吉他，目前能弹《晴天》的前奏，但是F和弦总是按不响。",
    "book": "用户最近在读刘慈欣的《三体》第二部《黑暗森林》，很喜欢面壁者的设定。",
    "diet": "用户对花生过敏，吃到会起荨麻疹，点外卖时会备注不要花生。",
    "coffee": "用户每天早上喝一杯美式咖啡，下午三点以后不喝咖啡，否则晚上失眠。",
    "sleep": "用户最近经常凌晨一点以后才睡，早上七点起床，感觉白天注意力下降。",
    "move": "用户打算年底从回龙观搬到望京，离公司更近，正在看两居室的房子。",
    "rent": "用户看中的望京两居室月租八千五，押一付三，房东要求签两年合同。",
    "python": "用户在业余时间学习Python数据分析，正在用pandas整理自己的跑步数据。",
    "plant": "用户阳台上种了薄荷和小番茄，夏天番茄结了很多果子。",
    "wedding": "用户的大学室友阿杰下个月在杭州结婚，用户是伴郎，需要准备致辞。",
    "english": "用户在准备雅思考试，口语目标是6.5分，每天早上练半小时口语。",
    "hub": "用户觉得最近生活很忙，但是很充实，非常喜欢现在的状态，也没有什么特别不开心的事情，"
    "就是有时候觉得有点累，不过总体来说还是很满意的，希望以后也能一直这样开心下去。",
    "hub2": "用户说自己是一个很喜欢尝试新事物的人，对很多东西都感兴趣，但是常常坚持不下来，"
    "觉得这是自己最大的缺点，非常希望能改掉这个习惯。",
}

# (the dialogue, the memory it is about first, any other memory it draws on)
DIALOGUES = [
    (
        "小王：我这两天膝盖又有点疼，今天早上跑了五公里，感觉右边膝盖不太舒服。\n"
        "助手：要注意休息。\n小王：你觉得我还能继续练吗？",
        "knee",
        ["run"],
    ),
    (
        "我家猫最近还是不怎么吃东西，我很担心，你说我是不是应该再带它去医院看看？还是换个猫粮试试？",
        "cat",
        ["catfood"],
    ),
    (
        "下个月就要答辩了，我有点紧张，不知道该怎么把我做的那个项目讲清楚，你能帮我理一下思路吗？",
        "promo",
        [],
    ),
    ("国庆快到了，我和小雨还在纠结行程，你觉得大理待几天比较合适？我们不想太赶。", "trip", []),
    ("我想明年春天去日本看樱花，需要提前准备什么吗？签证大概要多久？", "japan", ["visa"]),
    ("唉，F和弦还是按不响，手指好疼，我是不是不适合学乐器啊？", "guitar", []),
    (
        "最近晚上老是睡不着，白天上班也没精神，你有什么办法吗？我下午其实还喝了杯咖啡。",
        "coffee",
        ["sleep"],
    ),
    (
        "A：房子看得怎么样了？\nB：还在看，望京那套有点贵，房东还要签两年。\nA：那你觉得值得吗？",
        "rent",
        ["move"],
    ),
    ("我妈最近血压又高了，我很担心她，这周日打电话的时候我该提醒她注意些什么？", "mom", []),
    (
        "我在用pandas处理数据，但是日期那一列总是解析不对，我的跑步记录是按天存的。",
        "python",
        ["run"],
    ),
    ("阿杰的婚礼要我上台说几句，我完全不知道该说什么，你能帮我写个开头吗？", "wedding", []),
    ("最近在看黑暗森林，读到罗辑那部分，感觉很震撼，你怎么看面壁计划？", "book", []),
]

ABOUT = [about for _, about, _ in DIALOGUES]


@pytest.fixture
def memory_keys(project_scope, write_narrative) -> dict[int, str]:
    return {write_narrative(project_scope, text).pk: key for key, text in MEMORIES.items()}


@pytest.mark.parametrize(("dialogue", "about", "also"), DIALOGUES, ids=ABOUT)
def test_it_ranks_near_the_top_the_memory_a_chinese_dialogue_is_about(
    project_scope, memory_keys, dialogue, about, also
):
    hits = memory_search(query=dialogue, scope_ids=[project_scope.pk], limit=5)
    ranked = [memory_keys[hit.memory.pk] for hit in hits]
    assert about in ranked[:2], ranked
    assert set(also) <= set(ranked), ranked
    assert ranked[0] not in ("hub", "hub2"), ranked


@pytest.mark.parametrize(("dialogue", "about", "also"), DIALOGUES, ids=ABOUT)
def test_it_gives_the_turns_block_the_memory_a_chinese_dialogue_is_about(
    project_scope, memory_keys, dialogue, about, also
):
    items = t1_select(query=dialogue, scope_ids=[project_scope.pk], labels={}, session=None)
    assert about in [memory_keys[item.memory_id] for item in items]
