"""What the simulated Games hold: the event, NOCs, disciplines, their events, venues and scoring."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from typing import Literal

EVENT_CODE = "AG2026"
EVENT_NAME = "Aichi-Nagoya 2026"
TIME_ZONE = "Asia/Tokyo"
FIRST_DAY = date(2026, 9, 19)
LAST_DAY = date(2026, 10, 4)
HOST_NOC = "JPN"

# The 45 members of the Olympic Council of Asia, the NOCs an Asian Games draws from.
NOCS: dict[str, str] = {
    "AFG": "Afghanistan",
    "BAN": "Bangladesh",
    "BHU": "Bhutan",
    "BRN": "Bahrain",
    "BRU": "Brunei Darussalam",
    "CAM": "Cambodia",
    "CHN": "People's Republic of China",
    "HKG": "Hong Kong, China",
    "INA": "Indonesia",
    "IND": "India",
    "IRI": "Islamic Republic of Iran",
    "IRQ": "Iraq",
    "JOR": "Jordan",
    "JPN": "Japan",
    "KAZ": "Kazakhstan",
    "KGZ": "Kyrgyzstan",
    "KOR": "Republic of Korea",
    "KSA": "Saudi Arabia",
    "KUW": "Kuwait",
    "LAO": "Lao People's Democratic Republic",
    "LBN": "Lebanon",
    "MAC": "Macau, China",
    "MAS": "Malaysia",
    "MDV": "Maldives",
    "MGL": "Mongolia",
    "MYA": "Myanmar",
    "NEP": "Nepal",
    "OMA": "Oman",
    "PAK": "Pakistan",
    "PHI": "Philippines",
    "PLE": "Palestine",
    "PRK": "DPR Korea",
    "QAT": "Qatar",
    "SGP": "Singapore",
    "SRI": "Sri Lanka",
    "SYR": "Syrian Arab Republic",
    "THA": "Thailand",
    "TJK": "Tajikistan",
    "TKM": "Turkmenistan",
    "TLS": "Timor-Leste",
    "TPE": "Chinese Taipei",
    "UAE": "United Arab Emirates",
    "UZB": "Uzbekistan",
    "VIE": "Vietnam",
    "YEM": "Yemen",
}

# Bigger delegations enter more events, so a realistic draw favours them.
NOC_WEIGHT: dict[str, int] = {
    "CHN": 6,
    "JPN": 6,
    "KOR": 5,
    "IND": 4,
    "IRI": 3,
    "KAZ": 3,
    "UZB": 3,
    "THA": 3,
    "TPE": 3,
    "INA": 2,
    "MAS": 2,
    "PHI": 2,
    "VIE": 2,
    "HKG": 2,
    "KSA": 2,
    "QAT": 2,
    "PRK": 2,
    "MGL": 2,
}

# Names follow the ODF habit: FAMILY name in capitals, then the given name.
_EAST = ("JPN", "KOR", "CHN", "TPE", "HKG", "MAC", "PRK", "MGL")
_SOUTH = ("IND", "PAK", "BAN", "SRI", "NEP", "BHU", "MDV", "AFG")
_SOUTHEAST = ("THA", "INA", "MAS", "PHI", "VIE", "SGP", "MYA", "CAM", "LAO", "BRU", "TLS")
NAMES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    region: (tuple(families.split()), tuple(given.split()))
    for region, families, given in (
        (
            "east",
            "KIM LEE PARK CHOI SATO SUZUKI TAKAHASHI TANAKA WATANABE WANG LI ZHANG LIU CHEN "
            "YANG HUANG LIN WU BATBAYAR",
            "Minjun Seoyeon Jiho Haruto Yui Sota Hina Ren Wei Jing Hao Xin Yu Mei Tsung Erdene "
            "Daiki Aoi Jiwoo",
        ),
        (
            "south",
            "SINGH KUMAR SHARMA PATEL KHAN AHMED HOSSAIN PERERA SILVA THAPA GURUNG RAHMAN "
            "CHOPRA REDDY DORJI NAIR",
            "Neeraj Priya Arjun Ananya Rohit Sana Imran Ayesha Kavindu Nimali Bikash Sita "
            "Vikram Deepa Tashi Lakshya",
        ),
        (
            "southeast",
            "NGUYEN TRAN PHAM SANTOS REYES CRUZ LIM TAN WONG SRISAI CHAIYAPORN PRATAMA WIJAYA "
            "ABDULLAH ISMAIL AUNG",
            "Anh Linh Minh Juan Maria Jose Weiling Siti Arif Ratchanok Kittipong Putri Budi "
            "Nur Thiha Jonatan",
        ),
        (
            "west",
            "AL-HASSAN AL-SAADI RAHIMI HOSSEINI KARIMOV ALIYEV NURLANOV TURSUNOV HADDAD KHALIL "
            "SALEH MOHAMMADI ISMAILOV AL-MARRI",
            "Ahmad Fatima Omar Leila Ali Zahra Timur Aigerim Bekzod Nilufar Yousef Maryam "
            "Rustam Dana",
        ),
    )
}


def name_region(noc: str) -> str:
    if noc in _EAST:
        return "east"
    if noc in _SOUTH:
        return "south"
    if noc in _SOUTHEAST:
        return "southeast"
    return "west"


Gender = Literal["M", "W", "X"]
Entry = Literal["athlete", "team", "pair"]
# How an event is contested, which decides its phases (see _plan._phases):
#   groups: round-robin groups of 4, then knockouts; draw: a knockout bracket of `size`;
#   heats: `size` heats then a final; qual: `size` qualification groups then a final;
#   rounds: `size` fleet races then a medal race; final: one final only.
Plan = Literal["groups", "draw", "heats", "qual", "rounds", "final"]
Shape = Literal["seconds", "metres", "points", "kg", "place"]


@dataclass(frozen=True, slots=True)
class Measure:
    """How a measured result looks: its unit, which way is better, a typical value and spread."""

    shape: Shape
    better: Literal["lower", "higher"]
    base: float
    spread: float


@dataclass(frozen=True, slots=True)
class Score:
    """Head-to-head scores: the winner's and loser's ranges, and whether a draw can happen."""

    win: tuple[int, int]
    lose: tuple[int, int]
    draws: bool = False


@dataclass(frozen=True, slots=True)
class EventSpec:
    gender: Gender
    name: str
    plan: Plan
    size: int
    entry: Entry = "athlete"
    measure: Measure | None = None


@dataclass(frozen=True, slots=True)
class DisciplineSpec:
    code: str
    name: str
    venues: tuple[str, ...]
    first_day: date
    last_day: date
    slot_minutes: int  # usual gap between starts at the venue
    duration_minutes: int  # how long a unit runs, for the replay clock
    events: tuple[EventSpec, ...]
    score: Score | None = None  # head-to-head disciplines only


def _time(seconds: float) -> Measure:
    return Measure("seconds", "lower", seconds, 0.03)


def _metres(metres: float) -> Measure:
    return Measure("metres", "higher", metres, 0.06)


def _points(points: float, spread: float = 0.04) -> Measure:
    return Measure("points", "higher", points, spread)


def _kg(kg: float) -> Measure:
    return Measure("kg", "higher", kg, 0.06)


_PLACE = Measure("place", "lower", 0.0, 0.0)


def _both(
    name: str,
    plan: Plan,
    size: int,
    men: Measure | None = None,
    women: Measure | None = None,
    entry: Entry = "athlete",
) -> tuple[EventSpec, EventSpec]:
    return (
        EventSpec("M", f"Men's {name}", plan, size, entry, men),
        EventSpec("W", f"Women's {name}", plan, size, entry, women),
    )


def _classes(
    gender: Gender, prefix: str, classes: tuple[str, ...], size: int
) -> tuple[EventSpec, ...]:
    label = {"M": "Men's", "W": "Women's", "X": "Mixed"}[gender]
    return tuple(EventSpec(gender, f"{label} {prefix}{c}", "draw", size) for c in classes)


def _team_sport(men_groups: int, women_groups: int) -> tuple[EventSpec, ...]:
    return (
        EventSpec("M", "Men's Tournament", "groups", men_groups, "team"),
        EventSpec("W", "Women's Tournament", "groups", women_groups, "team"),
    )


def _d(month: int, day: int) -> date:
    return date(2026, month, day)


DISCIPLINES: tuple[DisciplineSpec, ...] = (
    DisciplineSpec(
        "ATH",
        "Athletics",
        ("Paloma Mizuho Stadium", "Nagoya Marathon Course"),
        first_day=_d(9, 26),
        last_day=_d(10, 2),
        slot_minutes=15,
        duration_minutes=20,
        events=(
            *_both("100m", "heats", 3, _time(10.15), _time(11.35)),
            *_both("200m", "heats", 3, _time(20.55), _time(23.10)),
            *_both("400m", "heats", 3, _time(45.90), _time(52.40)),
            *_both("800m", "heats", 2, _time(106.5), _time(123.0)),
            *_both("1500m", "heats", 2, _time(218.0), _time(253.0)),
            *_both("5000m", "final", 0, _time(800.0), _time(920.0)),
            *_both("10000m", "final", 0, _time(1680.0), _time(1900.0)),
            EventSpec("M", "Men's 110m Hurdles", "heats", 2, measure=_time(13.55)),
            EventSpec("W", "Women's 100m Hurdles", "heats", 2, measure=_time(13.05)),
            *_both("400m Hurdles", "heats", 2, _time(49.5), _time(56.5)),
            *_both("Marathon", "final", 0, _time(7850.0), _time(8900.0)),
            *_both("Long Jump", "qual", 2, _metres(7.95), _metres(6.55)),
            *_both("High Jump", "qual", 2, _metres(2.25), _metres(1.88)),
            *_both("Pole Vault", "final", 0, _metres(5.60), _metres(4.40)),
            *_both("Triple Jump", "final", 0, _metres(16.7), _metres(13.8)),
            *_both("Shot Put", "final", 0, _metres(20.2), _metres(18.5)),
            *_both("Javelin Throw", "qual", 2, _metres(82.0), _metres(60.0)),
            *_both("Hammer Throw", "final", 0, _metres(76.0), _metres(70.0)),
            *_both("Discus Throw", "final", 0, _metres(63.0), _metres(60.0)),
        ),
    ),
    DisciplineSpec(
        "SWM",
        "Swimming",
        ("Aichi International Aquatics Centre",),
        first_day=_d(9, 20),
        last_day=_d(9, 25),
        slot_minutes=10,
        duration_minutes=10,
        events=(
            *_both("50m Freestyle", "heats", 2, _time(21.9), _time(24.6)),
            *_both("100m Freestyle", "heats", 2, _time(48.0), _time(53.8)),
            *_both("200m Freestyle", "heats", 2, _time(106.0), _time(117.5)),
            *_both("400m Freestyle", "heats", 2, _time(225.0), _time(246.0)),
            *_both("100m Backstroke", "heats", 2, _time(53.5), _time(59.8)),
            *_both("100m Breaststroke", "heats", 2, _time(59.5), _time(66.5)),
            *_both("100m Butterfly", "heats", 2, _time(51.5), _time(57.5)),
            *_both("200m Individual Medley", "heats", 2, _time(118.0), _time(131.0)),
        ),
    ),
    DisciplineSpec(
        "FBL",
        "Football",
        ("Toyota Stadium", "Nagoya Mizuho Athletic Stadium", "Toyohashi Stadium"),
        first_day=_d(9, 19),
        last_day=_d(10, 4),
        slot_minutes=150,
        duration_minutes=110,
        events=_team_sport(4, 3),
        score=Score((1, 4), (0, 3), draws=True),
    ),
    DisciplineSpec(
        "BKB",
        "Basketball",
        ("Aichi Sky Expo Hall A", "Aichi Sky Expo Hall B"),
        first_day=_d(9, 24),
        last_day=_d(10, 4),
        slot_minutes=120,
        duration_minutes=100,
        events=_team_sport(4, 2),
        score=Score((72, 112), (55, 100)),
    ),
    DisciplineSpec(
        "VVO",
        "Volleyball",
        ("Nagoya Civic General Gymnasium", "Kariya City Gymnasium"),
        first_day=_d(9, 20),
        last_day=_d(10, 4),
        slot_minutes=120,
        duration_minutes=110,
        events=_team_sport(4, 3),
        score=Score((3, 3), (0, 2)),
    ),
    DisciplineSpec(
        "BDM",
        "Badminton",
        ("Toyohashi City General Gymnasium",),
        first_day=_d(9, 28),
        last_day=_d(10, 4),
        slot_minutes=40,
        duration_minutes=45,
        events=(
            *_classes("M", "", ("Singles",), 16),
            *_classes("W", "", ("Singles",), 16),
            EventSpec("M", "Men's Doubles", "draw", 8, "pair"),
            EventSpec("W", "Women's Doubles", "draw", 8, "pair"),
            EventSpec("X", "Mixed Doubles", "draw", 8, "pair"),
        ),
        score=Score((2, 2), (0, 1)),
    ),
    DisciplineSpec(
        "TTE",
        "Table Tennis",
        ("IG Arena",),
        first_day=_d(9, 20),
        last_day=_d(9, 26),
        slot_minutes=40,
        duration_minutes=40,
        events=(
            *_classes("M", "", ("Singles",), 16),
            *_classes("W", "", ("Singles",), 16),
            EventSpec("M", "Men's Doubles", "draw", 8, "pair"),
            EventSpec("W", "Women's Doubles", "draw", 8, "pair"),
            EventSpec("X", "Mixed Doubles", "draw", 8, "pair"),
        ),
        score=Score((4, 4), (0, 3)),
    ),
    DisciplineSpec(
        "CRI",
        "Cricket",
        ("Aichi Cricket Ground",),
        first_day=_d(9, 19),
        last_day=_d(10, 3),
        slot_minutes=210,
        duration_minutes=200,
        events=_team_sport(3, 2),
        score=Score((140, 220), (90, 200)),
    ),
    DisciplineSpec(
        "HOC",
        "Hockey",
        ("Nagoya Minato Hockey Stadium", "Nagoya Minato Hockey Pitch 2"),
        first_day=_d(9, 20),
        last_day=_d(10, 4),
        slot_minutes=120,
        duration_minutes=90,
        events=_team_sport(3, 2),
        score=Score((1, 5), (0, 4), draws=True),
    ),
    DisciplineSpec(
        "HBL",
        "Handball",
        ("Sky Hall Toyota",),
        first_day=_d(9, 21),
        last_day=_d(10, 4),
        slot_minutes=120,
        duration_minutes=90,
        events=_team_sport(3, 2),
        score=Score((24, 38), (18, 35)),
    ),
    DisciplineSpec(
        "BOX",
        "Boxing",
        ("Aichi Sky Expo Hall C",),
        first_day=_d(9, 24),
        last_day=_d(10, 3),
        slot_minutes=20,
        duration_minutes=15,
        events=(
            *_classes("M", "", ("51kg", "57kg", "63.5kg", "71kg", "80kg", "92kg", "+92kg"), 8),
            *_classes("W", "", ("50kg", "54kg", "57kg", "60kg", "66kg", "75kg"), 8),
        ),
        score=Score((3, 5), (0, 2)),
    ),
    DisciplineSpec(
        "JUD",
        "Judo",
        ("Aichi Budokan",),
        first_day=_d(9, 20),
        last_day=_d(9, 26),
        slot_minutes=15,
        duration_minutes=8,
        events=(
            *_classes(
                "M", "", ("-60kg", "-66kg", "-73kg", "-81kg", "-90kg", "-100kg", "+100kg"), 8
            ),
            *_classes("W", "", ("-48kg", "-52kg", "-57kg", "-63kg", "-70kg", "-78kg", "+78kg"), 8),
        ),
        score=Score((10, 10), (0, 1)),
    ),
    DisciplineSpec(
        "WRE",
        "Wrestling",
        ("Aichi Budokan Hall 2",),
        first_day=_d(9, 27),
        last_day=_d(10, 2),
        slot_minutes=15,
        duration_minutes=10,
        events=(
            *_classes("M", "Freestyle ", ("57kg", "65kg", "74kg", "86kg", "97kg", "125kg"), 8),
            *_classes("W", "Freestyle ", ("50kg", "53kg", "57kg", "62kg", "68kg", "76kg"), 8),
        ),
        score=Score((3, 12), (0, 8)),
    ),
    DisciplineSpec(
        "WLF",
        "Weightlifting",
        ("Okazaki Central General Park Gymnasium",),
        first_day=_d(9, 28),
        last_day=_d(10, 3),
        slot_minutes=150,
        duration_minutes=120,
        events=(
            EventSpec("M", "Men's 61kg", "final", 0, measure=_kg(300)),
            EventSpec("M", "Men's 73kg", "final", 0, measure=_kg(345)),
            EventSpec("M", "Men's 89kg", "final", 0, measure=_kg(375)),
            EventSpec("M", "Men's 102kg", "final", 0, measure=_kg(390)),
            EventSpec("M", "Men's +102kg", "final", 0, measure=_kg(420)),
            EventSpec("W", "Women's 49kg", "final", 0, measure=_kg(200)),
            EventSpec("W", "Women's 59kg", "final", 0, measure=_kg(225)),
            EventSpec("W", "Women's 71kg", "final", 0, measure=_kg(250)),
            EventSpec("W", "Women's 81kg", "final", 0, measure=_kg(260)),
            EventSpec("W", "Women's +81kg", "final", 0, measure=_kg(280)),
        ),
    ),
    DisciplineSpec(
        "GAR",
        "Artistic Gymnastics",
        ("Nippon Gaishi Hall",),
        first_day=_d(9, 22),
        last_day=_d(9, 27),
        slot_minutes=120,
        duration_minutes=120,
        events=(
            *_both("Team", "qual", 1, _points(250.0), _points(162.0), entry="team"),
            *_both("Individual All-Around", "qual", 1, _points(84.0), _points(54.0)),
            EventSpec("M", "Men's Floor Exercise", "qual", 1, measure=_points(14.4)),
            EventSpec("M", "Men's Pommel Horse", "qual", 1, measure=_points(14.6)),
            EventSpec("W", "Women's Vault", "qual", 1, measure=_points(14.2)),
            EventSpec("W", "Women's Balance Beam", "qual", 1, measure=_points(13.9)),
        ),
    ),
    DisciplineSpec(
        "CSP",
        "Canoe Sprint",
        ("Aichi Water Sports Course",),
        first_day=_d(9, 30),
        last_day=_d(10, 3),
        slot_minutes=15,
        duration_minutes=10,
        events=(
            *_both("Kayak Single 200m", "heats", 2, _time(35.0), _time(40.0)),
            *_both("Kayak Single 500m", "heats", 2, _time(98.0), _time(110.0)),
            *_both("Kayak Double 500m", "heats", 2, _time(90.0), _time(101.0), entry="team"),
            *_both("Canoe Single 200m", "heats", 2, _time(39.5), _time(46.0)),
        ),
    ),
    DisciplineSpec(
        "ROW",
        "Rowing",
        ("Aichi Water Sports Course",),
        first_day=_d(9, 20),
        last_day=_d(9, 25),
        slot_minutes=20,
        duration_minutes=10,
        events=(
            *_both("Single Sculls", "heats", 2, _time(410.0), _time(455.0)),
            *_both("Double Sculls", "heats", 2, _time(385.0), _time(425.0), entry="team"),
            *_both("Lightweight Double Sculls", "heats", 2, _time(390.0), _time(430.0), "team"),
            *_both("Four", "heats", 2, _time(360.0), _time(400.0), entry="team"),
        ),
    ),
    DisciplineSpec(
        "SAL",
        "Sailing",
        ("Gamagori Sailing Harbour",),
        first_day=_d(9, 21),
        last_day=_d(9, 27),
        slot_minutes=60,
        duration_minutes=60,
        events=(
            EventSpec("M", "Men's ILCA 7", "rounds", 3, measure=_PLACE),
            EventSpec("W", "Women's ILCA 6", "rounds", 3, measure=_PLACE),
            *_both("iQFOiL", "rounds", 3, _PLACE, _PLACE),
            *_both("Formula Kite", "rounds", 3, _PLACE, _PLACE),
            EventSpec("X", "Mixed Nacra 17", "rounds", 3, "pair", _PLACE),
            EventSpec("X", "Mixed 470", "rounds", 3, "pair", _PLACE),
        ),
    ),
    DisciplineSpec(
        "CTR",
        "Cycling Track",
        ("Ichinomiya Velodrome",),
        first_day=_d(9, 27),
        last_day=_d(9, 30),
        slot_minutes=20,
        duration_minutes=15,
        events=(
            *_both("Keirin", "heats", 2, _time(10.2), _time(11.3)),
            *_both("Sprint", "heats", 2, _time(9.8), _time(10.9)),
            *_both("Omnium", "final", 0, _points(120.0, 0.15), _points(110.0, 0.15)),
            *_both("Team Pursuit", "heats", 1, _time(234.0), _time(258.0), entry="team"),
        ),
    ),
    DisciplineSpec(
        "FEN",
        "Fencing",
        ("Kasugai Gymnasium",),
        first_day=_d(9, 21),
        last_day=_d(9, 26),
        slot_minutes=20,
        duration_minutes=15,
        events=(
            *_classes("M", "", ("Epee Individual", "Foil Individual", "Sabre Individual"), 16),
            *_classes("W", "", ("Epee Individual", "Foil Individual", "Sabre Individual"), 16),
        ),
        score=Score((15, 15), (5, 14)),
    ),
    DisciplineSpec(
        "TKW",
        "Taekwondo",
        ("Nagoya Congress Center",),
        first_day=_d(9, 30),
        last_day=_d(10, 3),
        slot_minutes=15,
        duration_minutes=10,
        events=(
            *_classes("M", "", ("-58kg", "-68kg", "-80kg", "+80kg"), 16),
            *_classes("W", "", ("-49kg", "-57kg", "-67kg", "+67kg"), 16),
        ),
        score=Score((2, 2), (0, 1)),
    ),
    DisciplineSpec(
        "ARC",
        "Archery",
        ("Tsurumai Park Archery Field",),
        first_day=_d(9, 27),
        last_day=_d(10, 2),
        slot_minutes=20,
        duration_minutes=15,
        events=(
            *_classes("M", "", ("Recurve Individual", "Compound Individual"), 8),
            *_classes("W", "", ("Recurve Individual", "Compound Individual"), 8),
            EventSpec("X", "Mixed Recurve Team", "draw", 8, "team"),
        ),
        score=Score((6, 6), (0, 5)),
    ),
    DisciplineSpec(
        "SHO",
        "Shooting",
        ("Aichi Shooting Range",),
        first_day=_d(9, 20),
        last_day=_d(9, 28),
        slot_minutes=90,
        duration_minutes=75,
        events=(
            *_both("10m Air Rifle", "qual", 1, _points(630.0, 0.01), _points(631.0, 0.01)),
            *_both("10m Air Pistol", "qual", 1, _points(580.0, 0.01), _points(575.0, 0.01)),
            *_both("Trap", "qual", 1, _points(120.0, 0.03), _points(115.0, 0.03)),
            *_both("Skeet", "qual", 1, _points(122.0, 0.03), _points(118.0, 0.03)),
            EventSpec("M", "Men's 25m Rapid Fire Pistol", "qual", 1, measure=_points(585.0, 0.01)),
            EventSpec("W", "Women's 25m Pistol", "qual", 1, measure=_points(585.0, 0.01)),
        ),
    ),
)
