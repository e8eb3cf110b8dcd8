"""Generated sessions for the scale benchmark: many tools, long outputs, values that rarely repeat.

A predictor that learns for weeks sees thousands of sessions, each with its own names, ids, dates and
texts, and outputs of tens of kilobytes. :func:`scale_sessions` generates such a history (seeded, one session
at a time, so a thousand sessions of 50 KB outputs never sit in memory together): twenty tools in a few
made-up applications (places, travel, messages, calendar, documents, orders, notes), with descriptions;
sessions of one to three turns, each a task of one to three calls; outputs that are listings of generated
records padded to about ``output_kb`` kilobytes. Names and ids are drawn from syllables, so most are new;
cities and categories come from pools of a few hundred, so they recur; dates and times are stated in the
many ways :mod:`forethought.bench.date_suite` writes them, resolved against a today stated in the system
prompt. Nothing comes from any data set. Arguments are what the task asks for, so accuracy on these
sessions is meaningful, but this is a cost benchmark: its accuracy is a sanity figure, not a target.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from forethought._core.calls import ToolCall
from forethought.bench import date_suite
from forethought.predictors.base import ObservedCall
from forethought.predictors.patterns.replay import RecordedSession, RecordedTurn

_SYLLABLES = ("ka", "lo", "mi", "ren", "tor", "vel", "sa", "qui", "dra", "bel", "nor", "fen", "ga", "zu", "ra",
              "phi", "mon", "tal", "ves", "cor", "lin", "dar", "ost", "wyn", "el", "ari", "bri", "cal", "dun", "har",
              "ith", "jo", "kes", "lum", "mar", "nev", "or", "pel", "rus", "sil", "tam", "ul", "vor", "yen", "zel")
_COMMON = ("report", "budget", "review", "plan", "update", "draft", "summary", "invoice", "schedule", "notes",
           "proposal", "agenda", "contract", "estimate", "checklist", "roadmap", "memo", "brief", "outline", "recap")
_ADJECTIVES = ("quiet", "bright", "urgent", "small", "late", "early", "final", "new", "old", "shared", "weekly",
               "annual", "local", "open", "short", "long", "careful", "rough", "clean", "quick")
_CATEGORY_NAMES = ("italian", "thai", "sushi", "vegan", "bakery", "steakhouse", "brunch", "tapas", "ramen",
                   "seafood", "bistro", "pizzeria", "noodle bar", "wine bar", "cafe", "diner", "grill", "taqueria",
                   "dumpling house", "tea room", "burger joint", "creperie", "brewery", "deli", "salad bar",
                   "curry house", "oyster bar", "patisserie", "smokehouse", "gelateria")
_CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "SEK", "NOK", "INR")
_PRIORITIES = ("low", "medium", "high", "urgent")
_CABINS = ("economy", "premium", "business", "first")
_REASONS = ("ordered by mistake", "arrived too late", "found a better price", "item damaged", "no longer needed")


def _schema(required: Sequence[str], optional: Sequence[str] = (), **types: Any) -> dict[str, Any]:
    props: dict[str, Any] = {}
    for name in (*required, *optional):
        props[name] = types.get(name, {"type": "string"})
    return {"type": "object", "properties": props, "required": list(required)}


_DATE = {"type": "string", "description": "A date, YYYY-MM-DD."}
_TIME = {"type": "string", "description": "A time of day, HH:MM (24-hour)."}
_INT = {"type": "integer"}
TOOLS: dict[str, tuple[str, dict[str, Any]]] = {
    "search_venues": ("Find places of a category in a city (restaurants, cafes, bars).",
                      _schema(["city", "category"], ["max_results"], max_results=_INT)),
    "venue_details": ("Get one place's record, menu and reviews by its id.", _schema(["venue_id"])),
    "reserve_table": ("Reserve a table at a place for a party on a date and time.",
                      _schema(["venue_id", "date", "time", "party_size"], ["note"], date=_DATE, time=_TIME,
                              party_size=_INT)),
    "find_flights": ("Search flights between two cities on a date.",
                     _schema(["origin", "destination", "date"], ["cabin"], date=_DATE,
                             cabin={"type": "string", "enum": list(_CABINS)})),
    "book_flight": ("Book a seat on a flight for a passenger.", _schema(["flight_id", "passenger"])),
    "book_hotel": ("Book a hotel room in a city from check-in to check-out.",
                   _schema(["city", "check_in", "check_out"], ["guests"], check_in=_DATE, check_out=_DATE,
                           guests=_INT)),
    "lookup_contact": ("Find people in the address book by name.", _schema(["name"])),
    "send_message": ("Send a text message to a contact.", _schema(["contact_id", "body"])),
    "schedule_event": ("Put an event in the calendar with its date, start and end time.",
                       _schema(["title", "date", "start", "end"], ["location"], date=_DATE, start=_TIME, end=_TIME)),
    "set_reminder": ("Set a reminder with a text at a time of day.", _schema(["text", "time"], time=_TIME)),
    "list_documents": ("List the documents of a folder.", _schema(["folder"])),
    "open_document": ("Read a document by its path.", _schema(["path"])),
    "save_document": ("Write a document at a path with a content.", _schema(["path", "content"])),
    "list_orders": ("List a customer's orders.", _schema(["customer_id"], ["status"])),
    "cancel_order": ("Cancel an order, giving a reason.", _schema(["order_id", "reason"])),
    "get_forecast": ("Weather forecast for a city on a date.", _schema(["city", "date"], date=_DATE)),
    "convert_amount": ("Convert an amount of money from one currency to another.",
                       _schema(["amount", "from_currency", "to_currency"], amount={"type": "number"})),
    "create_ticket": ("Open a support ticket with a title and priority, maybe assigned to someone.",
                      _schema(["title", "priority"], ["assignee"], priority={"type": "string",
                                                                           "enum": list(_PRIORITIES)})),
    "search_notes": ("Search the notes for a word.", _schema(["query"])),
    "share_document": ("Share a document with a contact by email.", _schema(["path", "email"])),
}
"""Tool name -> (description, JSON schema of its parameters)."""
SCHEMAS = {name: schema for name, (_, schema) in TOOLS.items()}
OPENAI_TOOLS: tuple[dict[str, Any], ...] = tuple(
    {"type": "function", "function": {"name": name, "description": description, "parameters": schema}}
    for name, (description, schema) in TOOLS.items())


@dataclass(frozen=True, slots=True)
class ScaleConfig:
    """Size and seed of the generated history."""

    sessions: int = 1000
    output_kb: int = 50
    """Approximate size of a listing output, in kilobytes (a record's output is a quarter of it)."""
    seed: int = 29


class _Draw:
    """The generator's random choices (names, ids, texts), all from one seeded ``random.Random``."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        pools = random.Random(seed + 1)
        self.cities = sorted({self._name(pools, 2, 3) for _ in range(400)})
        self.first_names = sorted({self._name(pools, 2, 2) for _ in range(300)})
        self.words = sorted({self._name(pools, 1, 3).lower() for _ in range(3000)})

    @staticmethod
    def _name(rng: random.Random, low: int, high: int) -> str:
        return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(low, high))).title()

    def name(self) -> str:
        return self._name(self.rng, 2, 3)

    def person(self) -> str:
        return f"{self.rng.choice(self.first_names)} {self._name(self.rng, 2, 4)}"

    def ident(self, prefix: str) -> str:
        return f"{prefix}-{self.rng.randrange(10**6):06d}"

    def sentence(self, words: int) -> str:
        rng = self.rng
        return " ".join(rng.choice(self.words) if rng.random() < 0.6 else rng.choice(_COMMON) for _ in range(words))

    def record(self, prefix: str, kind: str) -> dict[str, Any]:
        rng = self.rng
        return {"id": self.ident(prefix), "name": f"{self.name()} {kind.title()}", "city": rng.choice(self.cities),
                "rating": round(rng.uniform(2.5, 5.0), 1), "price": round(rng.uniform(5, 900), 2),
                "updated": (dt.date(2025, 1, 1) + dt.timedelta(days=rng.randrange(900))).isoformat(),
                "tags": [rng.choice(self.words) for _ in range(3)], "note": self.sentence(14)}

    def listing(self, field: str, prefix: str, kind: str, size: int, first: Sequence[dict[str, Any]] = ()
                ) -> tuple[list[dict[str, Any]], str]:
        """Records (``first`` at their head) until the JSON output ``{field: [...]}`` is about ``size`` bytes."""
        items = list(first)
        used = sum(len(json.dumps(item)) + 2 for item in items) + len(field) + 8
        while used < size or not items:
            item = self.record(prefix, kind)
            used += len(json.dumps(item)) + 2
            items.append(item)
        return items, json.dumps({field: items, "count": len(items)})


def _ok(payload: dict[str, Any]) -> str:
    return json.dumps({"status": "ok", **payload})


class _Session:
    """One session being generated: its today, its turns so far."""

    def __init__(self, draw: _Draw, output_kb: int) -> None:
        self.draw = draw
        self.rng = draw.rng
        self.size = output_kb * 1024
        self.today = date_suite.random_today(self.rng)
        self.user = draw.person()

    def _phrase(self, *families: str) -> date_suite.Phrase:
        return date_suite.FAMILIES[self.rng.choice(families)](self.rng, self.today)

    def dining(self) -> RecordedTurn:
        rng, draw = self.rng, self.draw
        city, category = rng.choice(draw.cities), rng.choice(_CATEGORY_NAMES)
        items, listing = draw.listing("venues", "VEN", category, self.size)
        pick = rng.randrange(min(4, len(items)))
        when = self._phrase("absolute", "relative", "weekday")
        clock = self._phrase("clock", "clock_context")
        party = rng.randint(2, 8)
        venue = items[pick]
        details = {"venue": venue, "reviews": [draw.record("REV", "review") for _ in range(max(1, self.size // 1200))]}
        ordinal = date_suite.ORDINAL_WORDS[pick]
        text = (f"Find {category} places in {city} and book the {ordinal} one for {party} people "
                f"{when.text} {clock.text}.")
        calls = (ObservedCall(ToolCall("search_venues", {"city": city, "category": category}), listing),
                 ObservedCall(ToolCall("venue_details", {"venue_id": venue["id"]}), json.dumps(details)),
                 ObservedCall(ToolCall("reserve_table", {"venue_id": venue["id"], "date": when.dates[0].isoformat(),
                                                         "time": clock.times[-1].strftime("%H:%M"),
                                                         "party_size": party}),
                              _ok({"reservation": draw.ident("RES")})))
        return RecordedTurn(text, calls)

    def travel(self) -> RecordedTurn:
        rng, draw = self.rng, self.draw
        origin, destination = rng.sample(draw.cities, 2)
        when = self._phrase("absolute", "relative", "weekday", "absolute_year")
        items, listing = draw.listing("flights", "FL", "flight", self.size)
        text = f"Find flights from {origin} to {destination} {when.text} and book the first one for me."
        calls = [ObservedCall(ToolCall("find_flights", {"origin": origin, "destination": destination,
                                                        "date": when.dates[0].isoformat()}), listing),
                 ObservedCall(ToolCall("book_flight", {"flight_id": items[0]["id"], "passenger": self.user}),
                              _ok({"ticket": draw.ident("TK")}))]
        if rng.random() < 0.6:
            stay = self._phrase("nights", "range")
            guests = rng.randint(1, 4)
            text += f" Then a hotel in {destination} {stay.text} for {guests} guests."
            hotel = {"city": destination, "check_in": stay.dates[0].isoformat(),
                     "check_out": stay.dates[1].isoformat(), "guests": guests}
            calls.append(ObservedCall(ToolCall("book_hotel", hotel),
                                      _ok({"booking": draw.ident("HB")})))
        return RecordedTurn(text, tuple(calls))

    def message(self) -> RecordedTurn:
        rng, draw = self.rng, self.draw
        person = draw.person()
        first = {**draw.record("CT", "contact"), "name": person, "email": f"{person.split()[0].lower()}@example.org"}
        items, listing = draw.listing("contacts", "CT", "contact", self.size // 4, [first])
        body = draw.sentence(rng.randint(4, 9)).capitalize()
        text = f"Send {person} a message saying '{body}'."
        return RecordedTurn(text, (ObservedCall(ToolCall("lookup_contact", {"name": person}), listing),
                                   ObservedCall(ToolCall("send_message", {"contact_id": items[0]["id"], "body": body}),
                                                _ok({"sent": True}))))

    def calendar(self) -> RecordedTurn:
        rng, draw = self.rng, self.draw
        title = f"{rng.choice(_ADJECTIVES)} {rng.choice(_COMMON)} with {draw.name()}".capitalize()
        day = self._phrase("weekday", "absolute", "relative")
        span = self._phrase("duration", "time_range")
        text = f"Put '{title}' in my calendar {day.text} {span.text}."
        calls = [ObservedCall(ToolCall("schedule_event", {"title": title, "date": day.dates[0].isoformat(),
                                                          "start": span.times[0].strftime("%H:%M"),
                                                          "end": span.times[1].strftime("%H:%M")}),
                              _ok({"event": draw.ident("EV")}))]
        if rng.random() < 0.5:
            remind = self._phrase("before_after")
            text += f" Remind me {remind.text}."
            reminder = {"text": title, "time": remind.times[0].strftime("%H:%M")}
            calls.append(ObservedCall(ToolCall("set_reminder", reminder),
                                      _ok({"reminder": draw.ident("RM")})))
        return RecordedTurn(text, tuple(calls))

    def documents(self) -> RecordedTurn:
        rng, draw = self.rng, self.draw
        folder = rng.choice(("reports", "drafts", "archive", "shared", "projects")) + "/" + draw.name().lower()
        name = f"{rng.choice(_COMMON)}-{draw.name().lower()}.txt"
        path = f"{folder}/{name}"
        first = {**draw.record("DOC", "document"), "path": path}
        _, listing = draw.listing("documents", "DOC", "document", self.size, [first])
        content = draw.sentence(self.size // 8)
        summary = f"summary-{name}"
        text = f"Open '{name}' in {folder} and save a short summary as '{summary}'."
        calls = [ObservedCall(ToolCall("list_documents", {"folder": folder}), listing),
                 ObservedCall(ToolCall("open_document", {"path": path}), content[: self.size]),
                 ObservedCall(ToolCall("save_document", {"path": f"{folder}/{summary}",
                                                         "content": draw.sentence(12)}), _ok({"saved": True}))]
        if rng.random() < 0.3:
            person = draw.person()
            email = f"{person.split()[0].lower()}.{person.split()[1].lower()}@example.org"
            text += f" Share it with {email}."
            calls.append(ObservedCall(ToolCall("share_document", {"path": f"{folder}/{summary}", "email": email}),
                                      _ok({"shared": True})))
        return RecordedTurn(text, tuple(calls))

    def orders(self) -> RecordedTurn:
        rng, draw = self.rng, self.draw
        customer = draw.ident("CUS")
        items, listing = draw.listing("orders", "ORD", "order", self.size)
        order = items[rng.randrange(min(12, len(items)))]["id"]
        reason = rng.choice(_REASONS)
        text = f"For customer {customer}, cancel order {order}: {reason}."
        return RecordedTurn(text, (ObservedCall(ToolCall("list_orders", {"customer_id": customer}), listing),
                                   ObservedCall(ToolCall("cancel_order", {"order_id": order, "reason": reason}),
                                                _ok({"cancelled": order}))))

    def errands(self) -> RecordedTurn:
        rng, draw = self.rng, self.draw
        choice = rng.randrange(4)
        if choice == 0:
            city = rng.choice(draw.cities)
            when = self._phrase("absolute", "relative", "weekday")
            return RecordedTurn(f"What's the weather in {city} {when.text}?", (ObservedCall(
                ToolCall("get_forecast", {"city": city, "date": when.dates[0].isoformat()}),
                json.dumps({"city": city, "high": rng.randint(-5, 35), "sky": rng.choice(draw.words)})),))
        if choice == 1:
            amount = rng.choice((rng.randint(5, 5000), round(rng.uniform(5, 900), 2)))
            source, target = rng.sample(_CURRENCIES, 2)
            return RecordedTurn(f"Convert {amount:,} {source} to {target}.", (ObservedCall(
                ToolCall("convert_amount", {"amount": float(amount), "from_currency": source, "to_currency": target}),
                json.dumps({"result": round(amount * rng.uniform(0.5, 2), 2)})),))
        if choice == 2:
            title = f"{rng.choice(_ADJECTIVES)} {rng.choice(draw.words)} {rng.choice(_COMMON)}"
            priority = rng.choice(_PRIORITIES)
            assignee = draw.person()
            return RecordedTurn(f"Open a {priority} priority ticket titled '{title}' and assign it to {assignee}.",
                                (ObservedCall(ToolCall("create_ticket", {"title": title, "priority": priority,
                                                                         "assignee": assignee}),
                                              _ok({"ticket": draw.ident("TIC")})),))
        query = rng.choice(draw.words)
        notes = " ".join(f"{rng.choice(draw.words)}-{rng.randint(1, 999)}" for _ in range(self.size // 12))
        return RecordedTurn(f"Search my notes for {query}.",
                            (ObservedCall(ToolCall("search_notes", {"query": query}), notes[: self.size]),))

    def system(self) -> str:
        return (f"You are an assistant with tools. {date_suite.today_text(self.rng, self.today)} "
                f"The user is {self.user}.")


_TASKS = ("dining", "travel", "message", "calendar", "documents", "orders", "errands")


def scale_sessions(config: ScaleConfig | None = None) -> Iterator[tuple[RecordedSession, str]]:
    """The generated sessions one at a time, each with its system prompt (deterministic in the seed)."""
    config = config or ScaleConfig()
    draw = _Draw(config.seed)
    for n in range(config.sessions):
        session = _Session(draw, config.output_kb)
        tasks = draw.rng.sample(_TASKS, draw.rng.randint(1, 3))
        turns = tuple(getattr(session, task)() for task in tasks)
        yield RecordedSession(f"scale{n}", turns, SCHEMAS, "generated", OPENAI_TOOLS), session.system()
