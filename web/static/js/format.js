// Formatting: amounts by their currency's minor unit (VND has none, EUR
// two: Intl knows every ISO 4217 currency), times in a named zone.

const LOCALE = 'en-GB';

export function money(amount, currency) {
  const f = new Intl.NumberFormat(LOCALE, { style: 'currency', currency, currencyDisplay: 'code' });
  const digits = f.resolvedOptions().maximumFractionDigits;
  return f.format(amount / 10 ** digits);
}

// minorDigits is how many digits currency's minor unit has (VND 0, EUR 2,
// KWD 3); null when Intl does not know the code.
export function minorDigits(currency) {
  try {
    return new Intl.NumberFormat(LOCALE, { style: 'currency', currency }).resolvedOptions().maximumFractionDigits;
  } catch {
    return null;
  }
}

// toMinor turns an amount typed in currency's major unit ("45.00" EUR)
// into the API's minor units (4500); NaN when it is not a number or has
// more decimals than the currency has.
export function toMinor(text, currency) {
  const d = minorDigits(currency);
  const m = /^\s*(\d+)(?:[.,](\d*))?\s*$/.exec(String(text));
  if (d === null || !m || (m[2] || '').replace(/0+$/, '').length > d) return NaN;
  return Number(m[1] + (m[2] || '').padEnd(d, '0').slice(0, d));
}

// fromMinor is toMinor's inverse, for a field's value: 4500 EUR is "45.00".
export function fromMinor(amount, currency) {
  const d = minorDigits(currency) ?? 0;
  return d ? (amount / 10 ** d).toFixed(d) : String(amount);
}

// dateTime formats an instant in zone tz, with the zone's offset.
export function dateTime(iso, tz) {
  return new Intl.DateTimeFormat(LOCALE, {
    timeZone: tz, weekday: 'short', day: 'numeric', month: 'short', year: 'numeric',
    hour: '2-digit', minute: '2-digit', timeZoneName: 'short',
  }).format(new Date(iso));
}

// stampWords says an RFC 3339 time written by the API as people read it,
// as dateTime does: in zone tz when the page knows its zone, else at the
// offset the time was written with (a car booking's are in its city's),
// which Intl takes as a zone of its own: "Mon 21 Dec 2026, 17:00 GMT+7".
// A browser whose Intl does not know offset zones says it in UTC.
export function stampWords(iso, tz) {
  const off = /[+-]\d{2}:\d{2}$/.exec(iso);
  try {
    return dateTime(iso, tz || (off ? off[0] : 'UTC'));
  } catch {
    return dateTime(iso, 'UTC');
  }
}

// period formats a booking's [from, to) briefly, in zone tz (the
// browser's own when not given), naming the zone once: "20 Dec, 09:00 –
// 23 Dec, 09:00 GMT+7".
// The year is said when the period is not all within this year.
export function period(from, to, tz) {
  const thisYear = new Date().getFullYear();
  const otherYear = [from, to].some((t) => new Date(t).getFullYear() !== thisYear);
  const opts = { timeZone: tz, day: 'numeric', month: 'short', year: otherYear ? 'numeric' : undefined, hour: '2-digit', minute: '2-digit' };
  const start = new Intl.DateTimeFormat(LOCALE, opts).format(new Date(from));
  const end = new Intl.DateTimeFormat(LOCALE, { ...opts, timeZoneName: 'short' }).format(new Date(to));
  return `${start} – ${end}`;
}

export function timeOnly(iso, tz) {
  return new Intl.DateTimeFormat(LOCALE, { timeZone: tz, hour: '2-digit', minute: '2-digit' }).format(new Date(iso));
}

// zoneLabel names a time zone for people: "Ho Chi Minh City time".
export function zoneLabel(tz, place) {
  return `${place || tz.split('/').pop().replace(/_/g, ' ')} time`;
}

// offsetMinutes is tz's offset from UTC at instant ms.
function offsetMinutes(tz, ms) {
  const name = new Intl.DateTimeFormat('en-US', { timeZone: tz, timeZoneName: 'longOffset' })
    .formatToParts(new Date(ms)).find((p) => p.type === 'timeZoneName').value; // "GMT+07:00" or "GMT"
  const m = /GMT([+-])(\d{2}):(\d{2})/.exec(name);
  return m ? (m[1] === '-' ? -1 : 1) * (Number(m[2]) * 60 + Number(m[3])) : 0;
}

function pad(n, w = 2) {
  return String(Math.abs(n)).padStart(w, '0');
}

// zonedISO turns a wall-clock time in tz ("2026-12-20T09:00", as a
// datetime-local input gives it) into RFC 3339 with tz's offset then.
export function zonedISO(local, tz) {
  const [d, t = '00:00'] = local.split('T');
  const [y, mo, da] = d.split('-').map(Number);
  const [h, mi] = t.split(':').map(Number);
  const wall = Date.UTC(y, mo - 1, da, h, mi);
  let off = offsetMinutes(tz, wall);
  off = offsetMinutes(tz, wall - off * 60000);
  const sign = off < 0 ? '-' : '+';
  return `${d}T${pad(h)}:${pad(mi)}:00${sign}${pad(Math.trunc(off / 60))}:${pad(off % 60)}`;
}

// wallClock is the inverse: an instant as a datetime-local value in tz.
export function wallClock(ms, tz) {
  const p = Object.fromEntries(new Intl.DateTimeFormat('en-CA', {
    timeZone: tz, year: 'numeric', month: '2-digit', day: '2-digit', hour: '2-digit', minute: '2-digit', hourCycle: 'h23',
  }).formatToParts(new Date(ms)).map((x) => [x.type, x.value]));
  return `${p.year}-${p.month}-${p.day}T${p.hour}:${p.minute}`;
}

// countdown renders seconds left as m:ss (or h:mm:ss).
export function countdown(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return h ? `${h}:${pad(m)}:${pad(r)}` : `${m}:${pad(r)}`;
}

export function titleCase(s) {
  return s.charAt(0) + s.slice(1).toLowerCase().replace(/_/g, ' ');
}
