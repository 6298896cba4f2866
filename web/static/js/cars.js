// Customer, cars: search a city for a period, a car's month calendar with
// its busy ranges (turnaround included), and booking it with one
// Idempotency-Key per attempt, retried safely when the network fails.
import { api, cities, send, claims } from './api.js';
import { h, slot, field, moreButton, whileBusy, focusAlert, setPageZone, signinHref } from './ui.js';
import { money, dateTime, zoneLabel, zonedISO, wallClock } from './format.js';

const DAY = 86400000;
// PAGE is how many cars a search shows at a time.
const PAGE = 20;

function defaultPeriod(tz) {
  const start = wallClock(Date.now() + 7 * DAY, tz).slice(0, 10) + 'T09:00';
  const end = wallClock(Date.now() + 10 * DAY, tz).slice(0, 10) + 'T09:00';
  return [start, end];
}

// localTime returns v when it is a datetime-local value naming a real
// wall-clock time ("2026-12-20T09:00", seconds allowed), else ''.
function localTime(v) {
  const m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::\d{2}(?:\.\d{1,3})?)?$/.exec(v || '');
  if (!m) return '';
  const [y, mo, d, hh, mi] = m.slice(1).map(Number);
  const t = new Date(Date.UTC(y, mo - 1, d, hh, mi));
  const same = t.getUTCFullYear() === y && t.getUTCMonth() === mo - 1 && t.getUTCDate() === d && t.getUTCHours() === hh && t.getUTCMinutes() === mi;
  return same ? v.slice(0, 16) : '';
}

// linkPeriod reads the period of a deep link's from and to: a value that
// is not a date and time gives way to the default period's, and a notice
// (or null) says so, naming the field.
function linkPeriod(q, tz) {
  const defaults = defaultPeriod(tz);
  const wrong = [];
  const [from, to] = [['from', 'Pick-up'], ['to', 'Return']].map(([k, label], i) => {
    const raw = q.get(k);
    const v = localTime(raw);
    if (raw && !v) wrong.push(`${label} "${raw}" is not a date and time`);
    return v || defaults[i];
  });
  return { from, to, wrong };
}

// linkNotice tells what of a deep link was not understood and was
// replaced (null when all was).
function linkNotice(wrong) {
  if (!wrong.length) return null;
  return h('p', { class: 'notice', role: 'status', dataset: { linkNotice: '' } },
    `The link was not understood: ${wrong.join('; ')}. Showing the usual choice instead; change it below.`);
}

export async function carsPage(page) {
  page.title('Rent a car');
  const q = page.url.searchParams;
  const list = await cities();
  const wanted = (q.get('city') || '').toUpperCase();
  const chosen = list.has(wanted) ? wanted : list.has('HN') ? 'HN' : [...list.keys()][0];
  const city = h('select', { name: 'city' }, [...list.values()].map((c) => h('option', { value: c.code, selected: c.code === chosen }, `${c.name} (${c.code})`)));
  const tz = () => list.get(city.value)?.timeZone || 'UTC';
  const period = linkPeriod(q, tz());
  if (wanted && !list.has(wanted)) period.wrong.unshift(`City "${q.get('city')}" is not one berth rents cars in`);
  const from = h('input', { type: 'datetime-local', name: 'from', required: true, value: period.from });
  const to = h('input', { type: 'datetime-local', name: 'to', required: true, value: period.to });
  const zone = h('p', { class: 'muted' });
  const showZone = () => { zone.textContent = `Times are in ${zoneLabel(tz(), list.get(city.value)?.name)}.`; };
  city.addEventListener('change', showZone);
  showZone();
  const errors = slot();
  const results = h('section', { 'aria-label': 'Cars found', 'aria-live': 'polite' });
  page.main.append(h('h1', {}, 'Rent a car'),
    h('form', {
      class: 'card', role: 'search',
      onsubmit: (e) => {
        e.preventDefault();
        page.navigate(`/app/cars?${new URLSearchParams({ city: city.value, from: from.value, to: to.value })}`);
      },
    }, h('div', { class: 'row' }, field('City', city), field('Pick-up', from), field('Return', to), h('button', { type: 'submit' }, 'Search')), zone),
    linkNotice(period.wrong) || '', errors.el, results);
  if (!q.get('city')) return;
  const p = new URLSearchParams({ city: city.value, from: zonedISO(from.value, tz()), to: zonedISO(to.value, tz()), limit: String(PAGE) });
  const link = (c) => `/app/cars/${c.id}?${new URLSearchParams({ from: from.value, to: to.value })}`;
  const card = (c) => h('li', { class: 'card', dataset: { car: String(c.id) } },
    h('h3', {}, h('a', { href: link(c) }, c.model)),
    h('p', {}, `${money(c.dailyPrice, c.currency)} a day · deposit ${money(c.deposit, c.currency)} · ${turnaroundText(c.turnaround)}`));
  const found = h('ul', { class: 'plain' });
  // The API pages the cars: nextAfter, while there may be more, is where
  // the next page starts.
  const more = moreButton('Show more cars', 'more-cars', () => load());
  let after = '';
  async function load() {
    errors.clear();
    if (after) p.set('after', after);
    let r;
    try {
      r = await whileBusy(more, () => api('GET', `/cars?${p}`));
    } catch (err) {
      errors.error(err);
      return;
    }
    if (page.left) return;
    const first = !found.isConnected;
    if (first && !r.cars.length) {
      results.append(h('p', {}, 'No car is free for the whole period.'));
      return;
    }
    if (first) results.append(h('h2', {}, `Free cars in ${list.get(city.value)?.name || city.value}`), found, more);
    const cards = r.cars.map(card);
    found.append(...cards);
    after = r.nextAfter ? String(r.nextAfter) : '';
    more.hidden = !after;
    // A keyboard user who asked for more goes on from the first new car.
    if (!first && cards.length) cards[0].querySelector('a').focus();
  }
  await load();
}

export async function carPage(page, id) {
  const q = page.url.searchParams;
  const car = await api('GET', `/cars/${id}`);
  const list = await cities();
  const tz = car.timeZone || 'UTC';
  const place = list.get(car.city)?.name || car.city;
  setPageZone(tz);
  page.title(car.model);
  const errors = slot();
  const period = linkPeriod(q, tz);
  const from = h('input', { type: 'datetime-local', required: true, value: period.from });
  const to = h('input', { type: 'datetime-local', required: true, value: period.to });
  const bookBtn = h('button', { type: 'submit', dataset: { action: 'book-car' } }, 'Book');
  const cal = h('section', { 'aria-label': 'Calendar' });
  let month = new Date(`${period.from.slice(0, 7)}-01T00:00:00Z`);

  // drawMonth redraws the calendar; focus names the month button (prev or
  // next) that asked, whose redrawn twin then has the focus (the old one
  // is gone with the old calendar).
  async function drawMonth(focus) {
    const y = month.getUTCFullYear(), m = month.getUTCMonth();
    const first = `${y}-${String(m + 1).padStart(2, '0')}-01T00:00`;
    const nextMonth = new Date(Date.UTC(y, m + 1, 1));
    const last = `${nextMonth.getUTCFullYear()}-${String(nextMonth.getUTCMonth() + 1).padStart(2, '0')}-01T00:00`;
    const r = await api('GET', `/cars/${id}/calendar?${new URLSearchParams({ from: zonedISO(first, tz), to: zonedISO(last, tz) })}`);
    const busy = r.busy.map((b) => ({ from: Date.parse(b.from), to: Date.parse(b.to), raw: b }));
    const name = new Intl.DateTimeFormat('en-GB', { month: 'long', year: 'numeric', timeZone: 'UTC' }).format(month);
    const days = new Date(Date.UTC(y, m + 1, 0)).getUTCDate();
    const lead = (new Date(Date.UTC(y, m, 1)).getUTCDay() + 6) % 7; // Monday first
    const now = Date.now();
    const want = periodAsked();
    const cells = [];
    for (let i = 0; i < lead; i++) cells.push(h('td', { class: 'out' }));
    for (let d = 1; d <= days; d++) {
      const dayStart = Date.parse(zonedISO(`${y}-${String(m + 1).padStart(2, '0')}-${String(d).padStart(2, '0')}T00:00`, tz));
      const dayEnd = dayStart + DAY;
      const over = busy.filter((b) => b.from < dayEnd && b.to > dayStart);
      const full = over.some((b) => b.from <= dayStart && b.to >= dayEnd);
      // A day over in the car's zone cannot be booked, whatever the
      // calendar says of it; the period asked for is marked as such.
      const past = dayEnd <= now;
      const chosen = want && want.from < dayEnd && want.to > dayStart;
      const cls = [past ? 'past' : full ? 'busy' : over.length ? 'part' : '', chosen ? 'chosen' : ''].filter(Boolean).join(' ');
      const tag = past ? h('span', { class: 'tag' }, 'past') : over.length ? h('span', { class: 'tag' }, full ? 'booked' : 'part booked') : h('span', { class: 'sr-only' }, 'free');
      const data = { day: String(d), busy: full ? 'full' : over.length ? 'part' : 'free' };
      if (past) data.past = '';
      if (chosen) data.chosen = '';
      cells.push(h('td', { class: cls || undefined, dataset: data },
        h('span', { class: 'day' }, d), tag, chosen ? h('span', { class: 'tag pick' }, 'your dates') : ''));
    }
    while (cells.length % 7) cells.push(h('td', { class: 'out' }));
    const weeks = [];
    for (let i = 0; i < cells.length; i += 7) weeks.push(h('tr', {}, cells.slice(i, i + 7)));
    const turn = car.turnaround && car.turnaround !== '0s' ? ` The car needs ${car.turnaround} between rentals (cleaning and inspection): a booking's busy time runs from ${car.turnaround} before it to ${car.turnaround} after it, and your rental may not overlap it.` : '';
    cal.replaceChildren(
      h('div', { class: 'row' },
        h('button', { type: 'button', class: 'secondary', dataset: { month: 'prev' }, onclick: () => { month = new Date(Date.UTC(y, m - 1, 1)); drawMonth('prev'); } }, '← ', h('span', { class: 'sr-only' }, 'Previous month')),
        h('h2', { id: 'month' }, name),
        h('button', { type: 'button', class: 'secondary', dataset: { month: 'next' }, onclick: () => { month = new Date(Date.UTC(y, m + 1, 1)); drawMonth('next'); } }, h('span', { class: 'sr-only' }, 'Next month'), ' →')),
      h('table', { class: 'calendar', 'aria-labelledby': 'month' },
        h('thead', {}, h('tr', {}, ['Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat', 'Sun'].map((d) => h('th', { scope: 'col' }, d)))),
        h('tbody', {}, weeks)),
      h('p', { class: 'muted' }, `Times in ${zoneLabel(tz, place)}.${turn}`),
      busy.length ? h('ul', { class: 'plain', dataset: { busyList: '' } }, busy.map((b) => h('li', {},
        'Busy from ', h('time', { datetime: b.raw.from }, dateTime(b.raw.from, tz)), ' to ', h('time', { datetime: b.raw.to }, dateTime(b.raw.to, tz)),
        // One span may be several rentals back to back (their busy times
        // meet or overlap): it says so, never "the rental".
        turn ? h('span', { class: 'muted' }, ` (booked: rentals with their ${car.turnaround} turnarounds)`) : ''))) : h('p', {}, 'Free all month.'));
    if (focus) cal.querySelector(`[data-month="${focus}"]`)?.focus();
  }

  // periodAsked is the period in the form (the link's, at first) as
  // instants, or null when it is not a period.
  function periodAsked() {
    const [f, t] = [localTime(from.value), localTime(to.value)];
    if (!f || !t) return null;
    const p = { from: Date.parse(zonedISO(f, tz)), to: Date.parse(zonedISO(t, tz)) };
    return p.from < p.to ? p : null;
  }
  for (const input of [from, to]) input.addEventListener('change', () => drawMonth().catch((err) => errors.error(err)));

  async function book(e) {
    e.preventDefault();
    errors.clear();
    if (!claims()) {
      errors.show(h('div', { class: 'alert', role: 'alert' }, 'Sign in to book. ', h('a', { href: signinHref() }, 'Sign in'), ' · Code: ', h('code', {}, 'unauthenticated')));
      focusAlert(errors.el);
      return;
    }
    bookBtn.disabled = true;
    try {
      // One attempt, one key: retries of this attempt reuse it, so a lost
      // answer never books twice; the next click is a new attempt.
      const b = await send('POST', '/bookings', { carId: car.id, from: zonedISO(from.value, tz), to: zonedISO(to.value, tz) });
      page.navigate(`/app/bookings/${b.bookingId}`);
    } catch (err) {
      bookBtn.disabled = false;
      errors.error(err);
      // The button lost the focus when it was disabled: it goes to the
      // alert that says why (scrolled into view), never to the body.
      focusAlert(errors.el);
      if (err.code === 'car_unavailable') drawMonth().catch(() => {});
    }
  }

  page.main.append(
    h('p', {}, h('a', { href: `/app/cars?city=${car.city}` }, `← Cars in ${place}`)),
    h('h1', {}, car.model),
    h('p', {}, `${place} · ${money(car.dailyPrice, car.currency)} a day · deposit ${money(car.deposit, car.currency)} (paid when you book) · ${turnaroundText(car.turnaround)}`),
    linkNotice(period.wrong) || '',
    cal,
    h('form', { class: 'card', onsubmit: book },
      h('h2', {}, 'Book this car'),
      h('div', { class: 'row' }, field(`Pick-up (${zoneLabel(tz, place)})`, from), field(`Return (${zoneLabel(tz, place)})`, to), bookBtn)),
    errors.el);
  await drawMonth();
}

// turnaroundText says a car's turnaround between rentals ("turnaround 2h"),
// or that it has none (the API writes "0s").
function turnaroundText(t) {
  return !t || t === '0s' ? 'no turnaround' : `turnaround ${t}`;
}
