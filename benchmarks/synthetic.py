"""A realistic synthetic registry: thousands of ops tools that read like real ones.

Tools are ``<system>-<object>-<action>`` with Chinese (most) or English texts,
parameters, trigger keywords and non-goals in the proportions of the eval
registry, so posting lists for common words (查看, list, 服务 ...) are as long
as they would be in a big real registry, which is what makes matching slow.
Deterministic for a given seed.
"""

from __future__ import annotations

import random

from bitong.v1.agent_pb2 import ToolDef

__all__ = ["synthetic_queries", "synthetic_tools"]

SYSTEMS = ["billing", "search", "auth", "orders", "payments", "gateway", "media", "crm", "erp", "mail",
           "chat", "ledger", "report", "catalog", "inventory", "shipping", "profile", "feed", "ads",
           "risk", "kyc", "wallet", "coupon", "push", "sms", "geo", "maps", "video", "audio", "docs",
           "wiki", "ci", "build", "registry", "vault", "metrics", "tracing", "alerting", "backup",
           "storage", "cdn", "dns", "edge", "lb", "mq", "etl", "bi", "ml", "feature", "ab"]
# (zh, en) pairs of things an ops tool acts on
OBJECTS = [("磁盘", "disk"), ("日志", "log"), ("容器", "container"), ("数据库", "database"),
           ("消息队列", "queue"), ("缓存", "cache"), ("证书", "certificate"), ("用户", "user"),
           ("进程", "process"), ("服务", "service"), ("域名", "domain"), ("端口", "port"),
           ("备份", "backup"), ("配置", "config"), ("镜像", "image"), ("集群", "cluster"),
           ("节点", "node"), ("索引", "index"), ("存储桶", "bucket"), ("防火墙规则", "firewall rule"),
           ("定时任务", "cron job"), ("告警规则", "alert rule"), ("工单", "ticket"), ("分支", "branch"),
           ("指标", "metric"), ("调用链", "trace"), ("会话", "session"), ("密钥", "secret"),
           ("令牌", "token"), ("虚拟机", "vm"), ("负载均衡", "load balancer"), ("文件", "file"),
           ("目录", "directory"), ("表", "table"), ("报表", "report"), ("订单", "order"),
           ("发票", "invoice"), ("邮件", "email"), ("通知", "notification"), ("版本", "release")]
# (zh, en, read-only?) actions
ACTIONS = [("查看", "show", True), ("列出", "list", True), ("统计", "count", True), ("检查", "check", True),
           ("搜索", "search", True), ("导出", "export", True), ("比较", "compare", True),
           ("监控", "monitor", True), ("重启", "restart", False), ("删除", "delete", False),
           ("创建", "create", False), ("同步", "sync", False), ("清理", "clean up", False),
           ("扩容", "scale out", False), ("迁移", "migrate", False), ("回滚", "roll back", False),
           ("上传", "upload", False), ("下载", "download", True), ("压缩", "compress", False),
           ("转换", "convert", False), ("修改", "update", False), ("暂停", "pause", False)]
OUTPUTS = ["并返回结果列表", "输出汇总表", "返回状态和耗时", "按时间排序", "显示最近 N 条",
           "返回 JSON", "给出数量和大小", "标出异常项"]
EN_OUTPUTS = ["and return the rows", "with status and duration", "sorted by time", "as JSON",
              "with counts and sizes", "flagging anomalies"]
PARAMS = [("path", "string", "目标路径"), ("host", "string", "主机名或 IP"), ("limit", "integer", "最多返回多少条"),
          ("since", "string", "开始时间"), ("name", "string", "对象名称"), ("env", "string", "环境"),
          ("dry_run", "boolean", "只演练不执行"), ("url", "string", "完整 URL"), ("version", "string", "版本号")]


def synthetic_tools(n: int, seed: int = 7) -> list[ToolDef]:
    """``n`` distinct synthetic tools."""
    rng = random.Random(seed)
    tools: list[ToolDef] = []
    seen: set[str] = set()
    while len(tools) < n:
        system = rng.choice(SYSTEMS)
        obj_zh, obj_en = rng.choice(OBJECTS)
        act_zh, act_en, read_only = rng.choice(ACTIONS)
        name = f"{system}-{obj_en.replace(' ', '-')}-{act_en.replace(' ', '-')}"
        if name in seen:
            name = f"{name}-{len(tools)}"
        seen.add(name)
        t = ToolDef(name=name, method="run", executor="shell", author="synthetic", created="2026-06-01")
        if rng.random() < 0.2:
            t.display = f"{system} {obj_en} {act_en}"
            t.intent = f"{act_en.capitalize()} the {obj_en}s of the {system} system {rng.choice(EN_OUTPUTS)}"
            t.why = f"Operators of {system} need to {act_en} {obj_en}s without logging in to every host."
        else:
            t.display = f"{system}{obj_zh}{act_zh}"
            t.intent = f"{act_zh} {system} 系统里的{obj_zh}，{rng.choice(OUTPUTS)}"
            t.why = f"{system} 的值班同学经常要{act_zh}{obj_zh}，以前只能登录机器手工做。"
        for pname, ptype, pdesc in rng.sample(PARAMS, rng.randint(1, 3)):
            t.params_schema[pname].type = ptype
            t.params_schema[pname].description = pdesc
            t.param_order.append(pname)
        if rng.random() < 0.5:
            t.trigger_keywords.extend([f"{act_zh}{obj_zh}", f"{act_en} {obj_en}"])
        if rng.random() < 0.55:
            o_zh, _, _ = rng.choice(ACTIONS)
            t.non_goals.append(f"不{o_zh}{obj_zh}（用 {system}-{obj_en.replace(' ', '-')}-x）")
        t.constraints.timeout_ms = 30000
        t.constraints.max_output_bytes = 65536
        t.constraints.require_confirm = not read_only
        tools.append(t)
    return tools


def synthetic_queries(n: int, seed: int = 11) -> list[str]:
    """Requests phrased the way people ask, against the synthetic registry's topics."""
    rng = random.Random(seed)
    zh = ["帮我{a}一下 {s} 的{o}", "{s} 那边的{o}{a}下", "{a} {s} {o}，急", "看看 {s} 的{o}是不是有问题",
          "能不能{a}一下{o}", "{s} {o} 怎么{a}"]
    en = ["{a} the {o}s on {s}", "can you {a} {s} {o}", "please {a} {o} for {s} in prod"]
    out = []
    for _ in range(n):
        s = rng.choice(SYSTEMS)
        o_zh, o_en = rng.choice(OBJECTS)
        a_zh, a_en, _ = rng.choice(ACTIONS)
        if rng.random() < 0.7:
            out.append(rng.choice(zh).format(a=a_zh, s=s, o=o_zh))
        else:
            out.append(rng.choice(en).format(a=a_en, s=s, o=o_en))
    return out
