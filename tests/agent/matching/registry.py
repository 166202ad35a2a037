"""A small registry of another team's tools, in several domains, for the matching tests.

Written for these tests (not taken from any eval file): documents, images,
money, office, files, messages, releases; some tools in English only.
"""

from __future__ import annotations

from bitong.parser import parse

from bitong.v1.agent_pb2 import ToolDef


def tool(name: str, display: str, intent: str, *, why: str = "团队日常需要", keywords: str = "",
         non_goals: str = "", params: str = "{}") -> ToolDef:
    text = (f"name: {name}\ndisplay: {display}\nintent: {intent}\nmethod: run\nexecutor: shell\n"
            f"params_schema: {params}\nconstraints: {{}}\nauthor: tests\ncreated: 2026-11-30\nwhy: {why}\n")
    if keywords:
        text += f"trigger_keywords: [{keywords}]\n"
    if non_goals:
        text += f"non_goals: {non_goals}\n"
    return parse(text, f"<{name}>")


def tools() -> list[ToolDef]:
    return [
        tool("pdf-merge", "PDF合并", "把多个PDF文件合并成一个文件", keywords="合并PDF"),
        tool("pdf-to-text", "PDF文字提取", "提取PDF文档里的文字内容"),
        tool("image-resize", "图片缩放", "按给定宽高缩放图片尺寸"),
        tool("currency-convert", "Currency converter",
             "Convert an amount of money from one currency to another at today's exchange rate",
             why="Finance asks for quick conversions"),
        tool("timezone-convert", "Time zone converter", "Convert a time between time zones"),
        tool("leave-request", "请假申请", "提交年假、病假等请假申请", non_goals="[不查询剩余假期天数]"),
        tool("leave-balance", "假期余额", "查询自己还剩几天年假和调休"),
        tool("email-send", "发送邮件", "给指定收件人发送一封电子邮件",
             params="{ to: { type: string, description: \"收件人邮箱\" } }"),
        tool("chat-post", "群消息", "往飞书群里发一条消息"),
        tool("line-count", "行数统计", "统计一个文本文件有多少行", keywords="多少行, 行数",
             params="{ path: { type: string, required: true, normalize: [path] } }"),
        tool("file-delete", "删除文件", "删除指定路径的文件",
             params="{ path: { type: string, required: true, normalize: [path] } }"),
        tool("release-rollback", "版本回滚", "把线上服务回滚到上一个稳定版本",
             non_goals="[不做升级, 不发布新版本（用 release-deploy）]"),
        tool("release-deploy", "发布上线", "把新版本发布到生产环境"),
        tool("meeting-book", "会议室预订", "预订公司会议室"),
        tool("weather-now", "Weather now", "Current weather conditions for a city"),
    ]
