"""A tiny hand-made SQLite database shared by the M-Schema and prompt golden tests."""

import sqlite3
from pathlib import Path

TINY_DESCRIPTIONS = {("player", "bio"): "short biography"}


def make_tiny_db(folder: Path) -> Path:
    """Write folder/tiny_league/tiny_league.sqlite and return its path."""
    path = folder / "tiny_league" / "tiny_league.sqlite"
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE team (id INTEGER PRIMARY KEY, name TEXT, founded DATE, email TEXT);
        CREATE TABLE player (
            player_id INTEGER, team_id INTEGER, bio VARCHAR(200), score REAL, nick,
            PRIMARY KEY (player_id), FOREIGN KEY (team_id) REFERENCES team(id));
        INSERT INTO team VALUES (1, 'Lions', '1990-05-01', 'lions@club.com'), (2, 'Tigers', '1985-01-02', NULL),
                                (3, 'Bears', '2001-07-07', 'bears@club.org'), (4, 'Wolves', '1979-03-03', NULL);
        INSERT INTO player VALUES (1, 1, 'Strong defender', 7.5, ''), (2, 1, 'Captain since 2019, known for long passes', NULL, NULL),
                                  (3, 2, 'Strong defender', 9.0, 'Ace');
    """)
    conn.commit()
    conn.close()
    return path


# The M-Schema text of make_tiny_db() with TINY_DESCRIPTIONS (golden for the schema and prompt tests).
TINY_GOLDEN = """【DB_ID】 tiny_league
# Table: team
[
(id:INTEGER, Primary Key, Examples: [1, 2, 3]),
(name:TEXT, Examples: [Lions, Tigers, Bears]),
(founded:DATE, Examples: [1990-05-01]),
(email:TEXT)
]
# Table: player
[
(player_id:INTEGER, Primary Key, Examples: [1, 2, 3]),
(team_id:INTEGER, Examples: [1, 2]),
(bio:VARCHAR, short biography, Examples: [Strong defender]),
(score:REAL, Examples: [7.5, 9.0]),
(nick:NULL, Examples: [Ace])
]
【Foreign keys】
player.team_id=team.id"""
