"""Support ticket triage declared as a decorated pydantic class.

A representative subset of `workflows/support_triage.yaml` (same field names and labels), written with
the Python declaration API instead of YAML. Run it with `python examples/triage.py`.
"""

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from decisionflow import ask, decision

DEPARTMENTS = {
    "infrastructure_reliability": "outages, downtime, 5xx or gateway errors, latency, capacity; the on-call site reliability team",
    "billing_and_finance": "charges, invoices, double billing, overage fees, refunds, credits, payment methods",
    "security_operations": "unauthorized access, leaked credentials, suspicious activity, vulnerabilities",
    "legal_and_compliance": "contract disputes, breach notices, regulatory, privacy and data-protection requests",
    "account_management": "renewals, plan changes, onboarding, licences, relationship and satisfaction concerns",
    "product_support": "how-to questions, configuration help, bugs in features, feature requests",
}

PRIORITIES = {
    "emergency_page_now": "critical and ongoing; page the on-call engineer immediately",
    "high_same_day": "serious impact; start work within hours",
    "normal_queue": "limited impact; handle in normal order",
    "low_backlog": "no urgency; handle when time allows",
}

ROOT_CAUSES = {
    "api_gateway": "gateway or load balancer errors such as 502 or 504 on API calls",
    "dns_and_routing": "name resolution, routing or regional network problems",
    "database_contention": "database locks, slow queries, replication lag",
    "authentication_tokens": "expired or rejected tokens, login or single sign-on failures",
    "billing_synchronisation": "usage or invoices out of sync with the billing system",
    "unknown_cause": "the ticket gives too little to tell",
}

REFUND_SCALES = {
    "partial_service_credit": "a credit for part of the period or service affected",
    "disputed_charge_refund": "money back for a specific wrong or duplicate charge",
    "full_month_credit": "a credit for a whole billing period",
    "negotiated_compensation": "damages or compensation beyond standard credits, to be negotiated",
}

SENTIMENTS = {
    "angry_or_threatening": "hostile tone, ultimatums, threats",
    "frustrated": "clearly unhappy but not threatening",
    "neutral": "matter-of-fact",
    "satisfied": "calm, appreciative or positive",
}

CHURN_RISKS = {
    "low_risk": "no sign of leaving",
    "moderate_risk": "unhappy, but no mention of leaving",
    "high_risk": "questions the value of the service or mentions alternatives",
    "cancellation_imminent": "explicitly threatens to terminate or cancel now",
}


@decision(
    name="support_triage_example",
    instructions=(
        "Triage one customer support ticket sent to a business software (SaaS) company. Read the whole "
        "ticket and answer every field from what the ticket says or clearly implies."
    ),
)
class Triage(BaseModel):
    primary_department: Annotated[
        Literal[
            "infrastructure_reliability",
            "billing_and_finance",
            "security_operations",
            "legal_and_compliance",
            "account_management",
            "product_support",
        ],
        ask("Which internal team should own the ticket and drive its resolution", options=DEPARTMENTS),
    ]
    production_affected: Annotated[
        bool, ask("Whether a production system or live service of the customer is down or degraded")
    ]
    security_incident: Annotated[
        bool,
        ask("Whether the ticket reports unauthorized access, leaked credentials or another security breach"),
    ]
    refund_requested: Annotated[
        bool, ask("Whether the customer asks for money back, a refund or a service credit")
    ]
    legal_threat: Annotated[
        bool,
        ask("Whether the customer threatens legal action, a breach-of-contract notice or contract termination"),
    ]
    severity: Annotated[
        int,
        ask(
            "How severe the issue is for the customer's business, 0 (no impact, a simple question) "
            "to 9 (complete production outage with ongoing revenue loss)"
        ),
        Field(ge=0, le=9),
    ]
    ticket_priority: Annotated[
        Literal["emergency_page_now", "high_same_day", "normal_queue", "low_backlog"],
        ask("Which queue priority the ticket should get", options=PRIORITIES, after=["severity"]),
    ]
    root_cause_area: Annotated[
        Literal[
            "api_gateway",
            "dns_and_routing",
            "database_contention",
            "authentication_tokens",
            "billing_synchronisation",
            "unknown_cause",
        ]
        | None,
        ask(
            "Which technical area most likely causes the failure",
            options=ROOT_CAUSES,
            when={"production_affected": [True]},
        ),
    ] = None
    refund_scale: Annotated[
        Literal["partial_service_credit", "disputed_charge_refund", "full_month_credit", "negotiated_compensation"]
        | None,
        ask(
            "What kind of refund or compensation fits the request",
            options=REFUND_SCALES,
            when={"refund_requested": [True]},
        ),
    ] = None
    customer_sentiment: Annotated[
        Literal["angry_or_threatening", "frustrated", "neutral", "satisfied"],
        ask("What the customer's emotional state is", options=SENTIMENTS),
    ]
    churn_risk: Annotated[
        Literal["low_risk", "moderate_risk", "high_risk", "cancellation_imminent"],
        ask("How likely the customer is to cancel or not renew", options=CHURN_RISKS),
    ]
    escalate_to_human: Annotated[
        bool,
        ask(
            "Whether a human agent must review the ticket before any automated reply is sent",
            after=["severity", "security_incident", "legal_threat"],
        ),
    ]


TEXT = """\
Subject: URGENT - checkout API returning 502 for the last 40 minutes

Our checkout has been down since 09:12 UTC: every POST /v2/charges call to your us-east endpoint
returns 502 Bad Gateway. We are losing thousands of dollars in sales every few minutes.

Separately, last month's invoice INV-8812 billed us twice for data overages ($4,800). Please refund
the duplicate charge.

If the outage is not fixed within the hour, our lawyers will send formal notice of breach of the
99.99% uptime SLA in our contract.

Environment: production, cluster us-east-1a. Account: Omnicorp Global (enterprise plan).
"""


if __name__ == "__main__":
    from decisionflow import Engine

    engine = Engine.load()
    result = engine.decide(Triage, TEXT)

    import rich

    rich.print(result)
    print(result.value)
