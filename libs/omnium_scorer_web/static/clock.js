// The match clock, from the sport's clock values in the state shown (the sport file's
// [console] clock): the playing time of the periods that ended, plus the running one so far.
// period_started_at is by the clock of the device that tapped Start.

function clockSeconds(match) {
  const running = match.running && match.period_started_at > 0;
  const now = Date.now() / 1000;
  return (match.played_seconds || 0) + (running ? Math.max(0, now - match.period_started_at) : 0);
}

export function clockText(match) {
  const seconds = Math.floor(clockSeconds(match));
  const mm = String(Math.floor(seconds / 60)).padStart(2, "0");
  return `${mm}:${String(seconds % 60).padStart(2, "0")}${match.running ? "" : " · clock stopped"}`;
}

// The minute a goal scored now is in (the first minute is 1).
export function clockMinute(match) {
  return Math.floor(clockSeconds(match) / 60) + 1;
}
