"""Domain templates of the built-in benchmark.

Every domain has the same four table roles, so one set of question templates covers them all:
    parent  (1) <-- child (n)          child.<parent>_id references parent
    child   (n) <-- link  --> other    link references child and other (many-to-many)
Each table and column has two spellings: naming 0 for training databases, naming 1 for the
held-out test databases (e.g. student/pupil, age/years_old), so test schemas read differently.
Column roles: name, cat (categorical text), num (integer), val (real), date (YYYY-MM-DD), qty.
"""

from __future__ import annotations

from dataclasses import dataclass

from rewardsql_jax.data.builtin import words as W

ROLES = ("parent", "child", "other", "link")


@dataclass(frozen=True)
class Col:
    """A column role, its two spellings, SQL type and value generator spec."""

    role: str
    names: tuple[str, str]
    sql_type: str
    gen: tuple

    def __post_init__(self):
        if self.sql_type not in ("TEXT", "INTEGER", "REAL", "DATE"):
            raise ValueError(f"unsupported column type {self.sql_type}")


@dataclass(frozen=True)
class Table:
    """A table role with its two spellings (singular, plural), columns and row-count range."""

    role: str
    names: tuple[str, str]
    plurals: tuple[str, str]
    cols: tuple[Col, ...]
    rows: tuple[int, int]

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"table role must be one of {ROLES}, got {self.role}")


@dataclass(frozen=True)
class Domain:
    """Four tables, one per role, in ROLES order."""

    name: str
    tables: tuple[Table, Table, Table, Table]

    def __post_init__(self):
        if tuple(t.role for t in self.tables) != ROLES:
            raise ValueError(f"domain {self.name}: tables must be in role order {ROLES}")

    def table(self, role: str) -> Table:
        """The table playing `role`."""
        return self.tables[ROLES.index(role)]


def _c(role, a, b, sql_type, *gen):
    return Col(role, (a, b), sql_type, tuple(gen))


DOMAINS: tuple[Domain, ...] = (
    Domain(
        "school",
        (
            Table(
                "parent",
                ("department", "faculty"),
                ("departments", "faculties"),
                (
                    _c("name", "dept_name", "title", "TEXT", "pick", W.SUBJECTS),
                    _c("cat", "building", "campus", "TEXT", "pick", W.BUILDINGS),
                    _c("num", "budget", "funding", "INTEGER", "int", 50_000, 900_000),
                ),
                (4, 7),
            ),
            Table(
                "child",
                ("student", "pupil"),
                ("students", "pupils"),
                (
                    _c("name", "name", "full_name", "TEXT", "person"),
                    _c("cat", "home_city", "hometown", "TEXT", "pick", W.CITIES[:8]),
                    _c("num", "age", "years_old", "INTEGER", "int", 17, 30),
                    _c("val", "gpa", "grade_average", "REAL", "real", 1.0, 4.0),
                    _c("date", "enrolled_on", "start_date", "DATE", "date", 2015, 2023),
                ),
                (18, 32),
            ),
            Table(
                "other",
                ("course", "subject"),
                ("courses", "subjects"),
                (
                    _c("name", "title", "subject_name", "TEXT", "course"),
                    _c("cat", "semester", "term", "TEXT", "pick", W.SEMESTERS),
                ),
                (8, 14),
            ),
            Table(
                "link",
                ("enrollment", "registration"),
                ("enrollments", "registrations"),
                (
                    _c("qty", "score", "mark", "INTEGER", "int", 35, 100),
                    _c("date", "enrollment_date", "registered_on", "DATE", "date", 2018, 2023),
                ),
                (30, 60),
            ),
        ),
    ),
    Domain(
        "shop",
        (
            Table(
                "parent",
                ("brand", "manufacturer"),
                ("brands", "manufacturers"),
                (
                    _c("name", "brand_name", "maker_name", "TEXT", "company"),
                    _c("cat", "country", "origin_country", "TEXT", "pick", W.COUNTRIES[:8]),
                    _c("num", "founded", "year_founded", "INTEGER", "int", 1950, 2015),
                ),
                (4, 7),
            ),
            Table(
                "child",
                ("product", "item"),
                ("products", "items"),
                (
                    _c("name", "product_name", "item_name", "TEXT", "title"),
                    _c("cat", "category", "department", "TEXT", "pick", W.PRODUCT_CATEGORIES),
                    _c("num", "stock", "units_in_stock", "INTEGER", "int", 0, 500),
                    _c("val", "price", "unit_price", "REAL", "real", 2.0, 900.0),
                    _c("date", "release_date", "launched_on", "DATE", "date", 2012, 2023),
                ),
                (20, 36),
            ),
            Table(
                "other",
                ("customer", "client"),
                ("customers", "clients"),
                (
                    _c("name", "customer_name", "client_name", "TEXT", "person"),
                    _c("cat", "city", "town", "TEXT", "pick", W.CITIES[8:16]),
                ),
                (10, 18),
            ),
            Table(
                "link",
                ("purchase", "sale"),
                ("purchases", "sales"),
                (
                    _c("qty", "quantity", "units", "INTEGER", "int", 1, 20),
                    _c("date", "purchase_date", "sold_on", "DATE", "date", 2019, 2023),
                ),
                (35, 70),
            ),
        ),
    ),
    Domain(
        "library",
        (
            Table(
                "parent",
                ("publisher", "press"),
                ("publishers", "presses"),
                (
                    _c("name", "publisher_name", "press_name", "TEXT", "company"),
                    _c("cat", "country", "nation", "TEXT", "pick", W.COUNTRIES[8:16]),
                    _c("num", "founded_year", "established", "INTEGER", "int", 1850, 2010),
                ),
                (4, 6),
            ),
            Table(
                "child",
                ("book", "volume"),
                ("books", "volumes"),
                (
                    _c("name", "title", "book_title", "TEXT", "title"),
                    _c("cat", "genre", "category", "TEXT", "pick", W.GENRES),
                    _c("num", "pages", "page_count", "INTEGER", "int", 80, 900),
                    _c("val", "price", "list_price", "REAL", "real", 5.0, 80.0),
                    _c("date", "published_on", "publication_date", "DATE", "date", 1990, 2023),
                ),
                (20, 34),
            ),
            Table(
                "other",
                ("member", "reader"),
                ("members", "readers"),
                (
                    _c("name", "member_name", "reader_name", "TEXT", "person"),
                    _c("cat", "membership", "tier", "TEXT", "pick", W.MEMBERSHIP_LEVELS),
                ),
                (10, 18),
            ),
            Table(
                "link",
                ("loan", "borrowing"),
                ("loans", "borrowings"),
                (
                    _c("qty", "days", "loan_days", "INTEGER", "int", 3, 45),
                    _c("date", "loan_date", "borrowed_on", "DATE", "date", 2020, 2023),
                ),
                (30, 60),
            ),
        ),
    ),
    Domain(
        "clinic",
        (
            Table(
                "parent",
                ("ward", "unit"),
                ("wards", "units"),
                (
                    _c("name", "ward_name", "unit_name", "TEXT", "pick", W.SPECIALTIES),
                    _c("cat", "building", "location", "TEXT", "pick", W.BUILDINGS),
                    _c("num", "beds", "bed_count", "INTEGER", "int", 8, 60),
                ),
                (4, 7),
            ),
            Table(
                "child",
                ("doctor", "physician"),
                ("doctors", "physicians"),
                (
                    _c("name", "doctor_name", "physician_name", "TEXT", "person"),
                    _c("cat", "specialty", "field", "TEXT", "pick", W.SPECIALTIES),
                    _c("num", "experience_years", "years_of_practice", "INTEGER", "int", 1, 35),
                    _c("val", "salary", "annual_pay", "REAL", "real", 60_000.0, 250_000.0),
                    _c("date", "hired_on", "hire_date", "DATE", "date", 2000, 2023),
                ),
                (16, 30),
            ),
            Table(
                "other",
                ("patient", "client"),
                ("patients", "clients"),
                (
                    _c("name", "patient_name", "client_name", "TEXT", "person"),
                    _c("cat", "city", "residence", "TEXT", "pick", W.CITIES[:10]),
                ),
                (10, 20),
            ),
            Table(
                "link",
                ("appointment", "visit"),
                ("appointments", "visits"),
                (
                    _c("qty", "duration_minutes", "minutes", "INTEGER", "int", 10, 90),
                    _c("date", "appointment_date", "visit_date", "DATE", "date", 2021, 2023),
                ),
                (30, 60),
            ),
        ),
    ),
    Domain(
        "airline",
        (
            Table(
                "parent",
                ("airline", "carrier"),
                ("airlines", "carriers"),
                (
                    _c("name", "airline_name", "carrier_name", "TEXT", "company"),
                    _c("cat", "country", "home_country", "TEXT", "pick", W.COUNTRIES[:10]),
                    _c("num", "fleet_size", "aircraft_count", "INTEGER", "int", 10, 400),
                ),
                (4, 7),
            ),
            Table(
                "child",
                ("pilot", "aviator"),
                ("pilots", "aviators"),
                (
                    _c("name", "pilot_name", "aviator_name", "TEXT", "person"),
                    _c("cat", "nationality", "citizenship", "TEXT", "pick", W.COUNTRIES[10:18]),
                    _c("num", "age", "age_years", "INTEGER", "int", 24, 64),
                    _c("val", "flight_hours", "hours_flown", "REAL", "real", 500.0, 20_000.0),
                    _c("date", "licensed_on", "license_date", "DATE", "date", 1990, 2022),
                ),
                (16, 30),
            ),
            Table(
                "other",
                ("aircraft", "plane"),
                ("aircraft", "planes"),
                (
                    _c("name", "model", "model_name", "TEXT", "aircraft"),
                    _c("cat", "manufacturer", "builder", "TEXT", "pick", W.MANUFACTURERS),
                ),
                (8, 14),
            ),
            Table(
                "link",
                ("flight", "trip"),
                ("flights", "trips"),
                (
                    _c("qty", "distance_km", "distance", "INTEGER", "int", 200, 9000),
                    _c("date", "flight_date", "departure_date", "DATE", "date", 2021, 2023),
                ),
                (30, 60),
            ),
        ),
    ),
    Domain(
        "music",
        (
            Table(
                "parent",
                ("label", "record_company"),
                ("labels", "record companies"),
                (
                    _c("name", "label_name", "company_name", "TEXT", "company"),
                    _c("cat", "country", "based_in", "TEXT", "pick", W.COUNTRIES[4:12]),
                    _c("num", "founded", "founding_year", "INTEGER", "int", 1960, 2018),
                ),
                (4, 6),
            ),
            Table(
                "child",
                ("artist", "musician"),
                ("artists", "musicians"),
                (
                    _c("name", "artist_name", "stage_name", "TEXT", "person"),
                    _c("cat", "genre", "style", "TEXT", "pick", W.MUSIC_GENRES),
                    _c("num", "albums", "album_count", "INTEGER", "int", 1, 25),
                    _c("val", "rating", "score", "REAL", "real", 1.0, 10.0),
                    _c("date", "debut_date", "first_release", "DATE", "date", 1980, 2022),
                ),
                (18, 32),
            ),
            Table(
                "other",
                ("venue", "stage"),
                ("venues", "stages"),
                (
                    _c("name", "venue_name", "stage_name", "TEXT", "venue"),
                    _c("cat", "city", "location", "TEXT", "pick", W.CITIES[10:20]),
                ),
                (8, 14),
            ),
            Table(
                "link",
                ("concert", "show"),
                ("concerts", "shows"),
                (
                    _c("qty", "attendance", "audience", "INTEGER", "int", 100, 20_000),
                    _c("date", "concert_date", "show_date", "DATE", "date", 2019, 2023),
                ),
                (30, 60),
            ),
        ),
    ),
)


def make_value(gen: tuple, rng) -> object:
    """Draw one value for a column generator spec with `rng` (a random.Random)."""
    kind = gen[0]
    if kind == "pick":
        return rng.choice(gen[1])
    if kind == "int":
        return rng.randint(gen[1], gen[2])
    if kind == "real":
        return round(rng.uniform(gen[1], gen[2]), 2)
    if kind == "date":
        return f"{rng.randint(gen[1], gen[2]):04d}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    if kind == "person":
        return f"{rng.choice(W.FIRST_NAMES)} {rng.choice(W.LAST_NAMES)}"
    if kind == "title":
        return f"{rng.choice(W.ADJECTIVES)} {rng.choice(W.NOUNS)}"
    if kind == "company":
        return f"{rng.choice(W.LAST_NAMES)} {rng.choice(W.COMPANY_SUFFIXES)}"
    if kind == "course":
        return f"{rng.choice(W.SUBJECTS)} {rng.randint(1, 4)}0{rng.randint(1, 9)}"
    if kind == "aircraft":
        return f"{rng.choice(W.MANUFACTURERS)} {rng.choice(W.AIRCRAFT_MODELS)}"
    if kind == "venue":
        return f"{rng.choice(W.NOUNS)} {rng.choice(W.VENUE_KINDS)}"
    raise ValueError(f"unknown value generator {gen!r}")
