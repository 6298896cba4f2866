// A booking's page: its status, the hold's live countdown, paying through
// the gateway's checkout, its events in order, hand-overs for hosts, and
// cancelling with the refund shown before it is confirmed.
import { api, airports, cities, send, claims } from './api.js';
import { h, slot, announce, every, moreButton, whileBusy, focusAlert } from './ui.js';
import { money, dateTime, zoneLabel, countdown, titleCase, period, timeOnly } from './format.js';
import { when } from './flights.js';
import { SeatMap } from './seatmap.js';

export async function bookingsPage(page) {
  page.title('My bookings');
  page.main.append(h('h1', {}, 'My bookings'));
  if (!claims()) {
    page.main.append(h('p', {}, h('a', { href: '/app/signin' }, 'Sign in'), ' to see your bookings.'));
    return;
  }
  const list = await pagedBookings('/bookings', {});
  if (!list.count()) {
    page.main.append(h('p', {}, 'No bookings yet. ', h('a', { href: '/app/' }, 'Find a flight'), ' or ', h('a', { href: '/app/cars' }, 'rent a car'), '.'));
  } else {
    page.main.append(list.el);
  }
  if (claims().role === 'customer') {
    const line = await waitlistSection();
    if (line.childElementCount) page.main.append(line);
  }
}

// waitlistSection lists the caller's places in the lines of sold-out fare
// classes: a waiting entry can be left; an offered one links to its
// booking, whose page counts the offer's hold down.
async function waitlistSection() {
  const errors = slot();
  const box = h('section', { 'aria-label': 'Waitlist' });
  async function load() {
    const r = await api('GET', '/waitlist');
    if (!r.waitlist.length) {
      box.replaceChildren();
      return;
    }
    box.replaceChildren(h('h2', {}, 'My waitlist'), errors.el, h('table', {},
      h('thead', {}, h('tr', {}, h('th', {}, 'Flight'), h('th', {}, 'Class'), h('th', { class: 'num' }, 'Seats'), h('th', {}, 'Status'), h('th', {}, ''))),
      h('tbody', {}, r.waitlist.map((e) => h('tr', { dataset: { waitlist: e.waitlistId } },
        h('td', {}, flightLink(e.flightId)),
        h('td', {}, titleCase(e.fareClass)),
        h('td', { class: 'num' }, String(e.quantity)),
        h('td', {}, entryStatus(e)),
        h('td', {},
          e.status === 'OFFERED' ? h('a', { href: `/app/bookings/${e.bookingId}`, dataset: { action: 'offer' } }, 'Your offer: pay before it lapses') : null,
          e.status === 'WAITING' ? h('button', { type: 'button', class: 'secondary', dataset: { action: 'leave-waitlist' }, onclick: () => leave(e.waitlistId) }, 'Leave the line') : null))))));
  }
  // flightLink names the flight by its code, route and departure once read.
  function flightLink(flightId) {
    const a = h('a', { href: `/app/flights/${flightId}` }, `Flight ${flightId}`);
    flightOf(flightId).then((f) => { if (f) a.textContent = f.name; });
    return a;
  }
  // entryStatus says what became of a place in line. DONE covers an offer
  // taken (booked) and one lost (not paid in time, payment failed,
  // cancelled), and a line closed by the departure: the offer's booking
  // tells which.
  function entryStatus(e) {
    const words = { WAITING: `Waiting, number ${e.position} in line`, OFFERED: 'Offered: seats held for you', CANCELLED: 'Left the line',
      DONE: e.bookingId ? 'Offer ended' : 'Closed: the flight departed' }[e.status] || titleCase(e.status);
    const span = h('span', { class: 'status', dataset: { waitlistStatus: e.status } }, words);
    if (e.status === 'DONE' && e.bookingId) {
      api('GET', `/bookings/${e.bookingId}`).then((bk) => {
        span.textContent = offerOutcome(bk);
        span.dataset.offerOutcome = bk.status;
      }).catch(() => {});
    }
    return span;
  }
  async function leave(id) {
    errors.clear();
    try {
      await api('DELETE', `/waitlist/${id}`);
      announce('You left the line.');
      await load();
    } catch (err) {
      errors.error(err);
    }
  }
  await load();
  return box;
}

// flightInfo holds, per flight id, what a list says of a flight: its
// code, route and departure in the departure airport's zone (null when it
// could not be read), asked once however many rows name it.
const flightInfo = new Map();
export function flightOf(id) {
  if (!flightInfo.has(id)) {
    flightInfo.set(id, Promise.all([api('GET', `/flights/${id}`), airports()]).then(([f, list]) => {
      const o = list.get(f.from);
      const tz = o?.timeZone || 'UTC';
      const dep = new Intl.DateTimeFormat('en-GB', { timeZone: tz, weekday: 'short', day: 'numeric', month: 'short', year: 'numeric', hour: '2-digit', minute: '2-digit' }).format(new Date(f.departureAt));
      return { ...f, name: `${f.code} ${f.from} → ${f.to}, ${dep} (${zoneLabel(tz, o?.city)})` };
    }).catch(() => null));
  }
  return flightInfo.get(id);
}

// statusWords is a booking status as the booking's page says it: "Held",
// "On trip".
export const statusWords = (status) => titleCase(status);

// carInfo holds the public view of each car a list names, asked once
// however many rows name it (null when it could not be read).
const carInfo = new Map();
function carOf(id) {
  if (!carInfo.has(id)) carInfo.set(id, api('GET', `/cars/${id}`).catch(() => null));
  return carInfo.get(id);
}

// bookingRow is a booking's row in a list, linked to its page; extra(b)
// fills an Actions column. A car booking says its car's model and its
// period in the car's time zone, as its page does, once the car is read
// (until then, or if it cannot be, the car's number and the browser's
// zone). The id, status and actions are never broken inside a word (at
// 390 px the What column wraps instead; with actions, the amount is left
// out).
export function bookingRow(b, extra) {
  const what = h('td', {}, b.kind === 'flight' ? `Flight ${b.flightId}, ${titleCase(b.fareClass)} ×${b.quantity}` : `Car ${b.carId}, ${period(b.from, b.to)}`);
  if (b.kind === 'flight') {
    flightOf(b.flightId).then((f) => {
      if (f) what.textContent = `${f.name}, ${titleCase(b.fareClass)} ×${b.quantity}`;
    });
  } else {
    carOf(b.carId).then((c) => {
      if (c) what.textContent = `${c.model} (car ${b.carId}), ${period(b.from, b.to, c.timeZone)}`;
    });
  }
  return h('tr', {},
    h('td', { class: 'nowrap' }, h('a', { href: `/app/bookings/${b.bookingId}` }, `#${b.bookingId}`)),
    what,
    h('td', { class: 'nowrap' }, h('span', { class: 'status', dataset: { bookingStatus: b.status } }, statusWords(b.status))),
    h('td', { class: extra ? 'num hide-narrow' : 'num' }, money(b.amount, b.currency)),
    extra ? h('td', { class: 'nowrap' }, extra(b)) : null);
}

// bookingTable lists bookings with links to their pages.
export function bookingTable(list, extra) {
  return h('table', {},
    h('thead', {}, h('tr', {}, h('th', { class: 'nowrap' }, 'Booking'), h('th', {}, 'What'), h('th', { class: 'nowrap' }, 'Status'),
      h('th', { class: extra ? 'num hide-narrow' : 'num' }, 'Amount'), extra ? h('th', { class: 'nowrap' }, 'Actions') : null)),
    h('tbody', {}, list.map((b) => bookingRow(b, extra))));
}

// BOOKINGS_PAGE is how many bookings a list loads at a time (the API
// allows 100).
const BOOKINGS_PAGE = 50;

// pagedBookings lists the bookings at path (GET /bookings, /host/bookings:
// newest first) a page at a time: while the last page was full, "Older
// bookings" appends the page before the last booking shown (?before=).
// It resolves once the first page is in (an error then is thrown); the
// later pages' errors are shown above the button.
export async function pagedBookings(path, params, extra) {
  const errors = slot();
  const el = h('div');
  const more = moreButton('Older bookings', 'older-bookings', () => load().catch((err) => errors.error(err)));
  let table = null;
  let last = '';
  let count = 0;
  async function load() {
    errors.clear();
    const p = new URLSearchParams(params);
    p.set('limit', String(BOOKINGS_PAGE));
    if (last) p.set('before', last);
    const r = await whileBusy(more, () => api('GET', `${path}?${p}`));
    const rows = r.bookings.map((b) => bookingRow(b, extra));
    if (!table) {
      table = bookingTable([], extra);
      el.append(table, errors.el, more);
    }
    table.tBodies[0].append(...rows);
    count += rows.length;
    if (r.bookings.length) last = String(r.bookings[r.bookings.length - 1].bookingId);
    more.hidden = r.bookings.length < BOOKINGS_PAGE;
    // A keyboard user who asked for more goes on from the first new one;
    // when there were none, the button goes and the focus moves to the
    // notice that says so, in its place (not to the page's body).
    if (p.has('before') && rows.length) rows[0].querySelector('a').focus();
    else if (p.has('before')) {
      const end = h('p', { class: 'muted', tabindex: '-1', dataset: { listEnd: '' } }, 'No older bookings.');
      more.after(end);
      end.focus();
      announce('No older bookings.');
    }
  }
  await load();
  return { el, count: () => count };
}

export async function bookingPage(page, id) {
  page.title(`Booking ${id}`);
  const errors = slot();
  const quote = slot();
  const body = h('div');
  page.main.append(h('h1', {}, `Booking #${id}`), errors.el, body, quote.el);
  let b = await api('GET', `/bookings/${id}`);
  let ctx = await context(b);
  let tick = null;
  const me = claims();
  // place names the booking's zone: the departure airport's city for a
  // flight, the car's city for a car.
  const place = () => (b.kind === 'flight' ? ctx.origin?.city : ctx.place);

  function draw() {
    clearInterval(tick);
    const status = h('span', { class: 'status', dataset: { bookingStatus: b.status } }, titleCase(b.status));
    const facts = h('dl', { class: 'kv' });
    const add = (k, ...v) => facts.append(h('dt', {}, k), h('dd', {}, ...v));
    if (b.kind === 'flight') {
      add('Flight', ctx.flight ? `${ctx.flight.code} ${ctx.flight.from} → ${ctx.flight.to}` : `#${b.flightId}`, ' ', h('a', { href: `/app/flights/${b.flightId}` }, 'seat map'));
      if (ctx.flight) add('Departs', when(ctx.flight.departureAt, ctx.origin));
      add('Fare class', titleCase(b.fareClass));
      // Seats bought as a number are assigned later, while the booking is
      // live; on one that ended they never will be: no row then.
      if (b.seats?.length) add('Seats', b.seats.join(', '));
      else if (b.status === 'HELD' || b.status === 'CONFIRMED') add('Seats', `${b.quantity} ${titleCase(b.fareClass)} seat${b.quantity > 1 ? 's' : ''}, to be assigned`);
    } else {
      add('Car', ctx.car ? `${ctx.car.model} (${ctx.car.city})` : `#${b.carId}`, ' ', h('a', { href: `/app/cars/${b.carId}` }, 'calendar'));
      add('Pick-up', h('time', { datetime: b.from }, dateTime(b.from, ctx.tz)));
      add('Return', h('time', { datetime: b.to }, dateTime(b.to, ctx.tz)), ' ', h('span', { class: 'muted' }, `(${zoneLabel(ctx.tz, ctx.place)})`));
      add('Rental price', money(b.rentalPrice, b.currency), h('span', { class: 'muted' }, ' (paid at pick-up)'));
    }
    add(b.kind === 'car' ? 'Deposit, paid now' : 'Amount', h('strong', {}, money(b.amount, b.currency)));
    const refundState = b.refundStatus ? ` (${b.refundStatus.toLowerCase()})` : '';
    if (b.refundAmount !== undefined && b.status === 'CANCELLED') add('Refund', h('strong', { dataset: { refund: '' } }, money(b.refundAmount, b.currency)), b.refundAmount > 0 ? refundState : '');
    // Money that came for the booking but could not pay for it (late, a
    // second payment) goes back in full, apart from any refund.
    if (b.returnedAmount) add('Returned', h('strong', { dataset: { returned: '' } }, money(b.returnedAmount, b.currency)), refundState,
      h('span', { class: 'muted' }, ' — a payment that could not be used for this booking'));
    if (b.cancelReason) add('Cancelled by', b.cancelReason.replace('_', ' '));

    const actions = h('div', { class: 'row' });
    let clock = null;
    if (b.status === 'HELD') {
      const left = h('span', { class: 'countdown', role: 'timer', 'aria-live': 'off' });
      // The deadline names its place, not just an offset: the departure
      // airport's city for a flight, the car's city for a car.
      clock = h('p', { dataset: { payBefore: '' } }, 'Pay before ', h('time', { datetime: b.holdExpiresAt, dataset: { holdExpires: b.holdExpiresAt } }, dateTime(b.holdExpiresAt, ctx.tz)),
        ' ', h('span', { class: 'muted' }, `(${zoneLabel(ctx.tz, place())})`), ': ', left, ' left');
      const end = Date.parse(b.holdExpiresAt);
      let warned = false;
      const show = () => {
        const s = (end - Date.now()) / 1000;
        left.textContent = countdown(s);
        if (s < 60 && !warned) { warned = true; announce('Less than a minute left to pay.'); }
        if (s <= 0) { clearInterval(tick); reload(); }
      };
      show();
      tick = setInterval(show, 1000);
      if (me && String(b.customerId) === me.sub && me.role === 'customer') {
        actions.append(h('button', { type: 'button', dataset: { action: 'pay' }, onclick: pay }, `Pay ${money(b.amount, b.currency)}`));
        // A hold is extended once: once it was (extendedAt), More time
        // gives way to a note saying so, which keeps the focus it had.
        if (b.extendedAt) {
          actions.append(h('p', { class: 'muted', tabindex: '-1', dataset: { extended: b.extendedAt } },
            `More time was given at ${timeOnly(b.extendedAt, ctx.tz)} (${zoneLabel(ctx.tz, place())}): a hold is extended only once.`));
        } else {
          actions.append(h('button', { type: 'button', class: 'secondary', dataset: { action: 'extend' }, onclick: extend }, 'More time'));
        }
      }
    }
    if (b.kind === 'car' && me && (me.role === 'host' || me.role === 'admin')) {
      if (b.status === 'CONFIRMED') actions.append(h('button', { type: 'button', dataset: { action: 'pickup' }, onclick: () => move('pickup') }, 'Hand over (pick-up)'));
      if (b.status === 'ON_TRIP') actions.append(h('button', { type: 'button', dataset: { action: 'return' }, onclick: () => move('return') }, 'Take back (return)'));
    }
    if (b.status === 'HELD' || b.status === 'CONFIRMED') {
      actions.append(h('button', { type: 'button', class: 'danger', dataset: { action: 'cancel' }, onclick: askCancel }, b.status === 'HELD' ? 'Release hold' : 'Cancel booking'));
    }
    // A quantity booking of a flight (a quantity hold, a waitlist offer)
    // gets its seats here while HELD or CONFIRMED: the same section (and
    // its selection) across redraws.
    const own = me?.role === 'customer' && String(b.customerId) === me.sub;
    if (own && b.kind === 'flight' && !b.seats?.length && (b.status === 'HELD' || b.status === 'CONFIRMED') && ctx.seatMap) {
      seats ??= seatPicker();
    } else seats = null;
    // replaceChildren would show a null as the text "null": only nodes.
    body.replaceChildren(...[h('p', { tabindex: '-1', dataset: { statusLine: '' } }, 'Status: ', status), facts, clock, actions, seats?.el, eventsBox].filter(Boolean));
  }

  // seatPicker shows the flight's seat map for the booking's fare class:
  // exactly quantity seats are chosen, then assigned in one request
  // (POST /bookings/{id}/seats); a seat someone took meanwhile is refused
  // (seat_unavailable, the map then shows it taken).
  let seats = null;
  function seatPicker() {
    const n = b.quantity;
    const cls = titleCase(b.fareClass);
    const alerts = slot();
    const count = h('p', { id: 'seat-count', 'aria-live': 'polite' });
    const button = h('button', { type: 'button', dataset: { action: 'assign-seats' }, 'aria-describedby': 'seat-count', onclick: assign }, `Assign ${n === 1 ? 'this seat' : 'these seats'}`);
    const map = new SeatMap({
      classNames: { [b.fareClass]: cls },
      onToggle: (no, fc) => {
        if (fc !== b.fareClass) {
          announce(`Seat ${no} is not ${cls}: choose a ${cls} seat.`);
          return;
        }
        if (map.selected.has(no)) map.selected.delete(no);
        else if (map.selected.size >= n) {
          announce(`You have ${n} seat${n > 1 ? 's' : ''} to place: unselect one first.`);
          return;
        } else map.selected.add(no);
        map.restyle();
        show();
        announce(`Seat ${no} ${map.selected.has(no) ? 'selected' : 'unselected'}. ${map.selected.size} of ${n} chosen.`);
      },
    });
    function show() {
      const k = map.selected.size;
      count.textContent = `${k} of ${n} ${cls} seat${n > 1 ? 's' : ''} chosen${k ? ` (${[...map.selected].sort().join(', ')})` : ''}.`
        + (k === n ? '' : ` Choose ${n - k} more to assign them.`);
      button.disabled = k !== n;
    }
    async function assign() {
      if (button.disabled) return;
      alerts.clear();
      try {
        b = await whileBusy(button, () => api('POST', `/bookings/${id}/seats`, { body: { seats: [...map.selected].sort() } }));
        await loadEvents();
        draw();
        refocus('[data-status-line]');
        announce(`Seats ${b.seats.join(', ')} are yours.`);
      } catch (err) {
        alerts.error(err);
        if (err.code === 'seat_unavailable' || err.code === 'validation_failed') await refresh().catch(() => {});
        show();
        focusAlert(alerts.el);
      }
    }
    async function refresh() {
      const sm = await api('GET', `/flights/${b.flightId}/seats`);
      const lost = map.update(sm.seats);
      if (lost.length) announce(`Seat${lost.length > 1 ? 's' : ''} ${lost.join(', ')} just went to someone else.`);
      show();
    }
    const el = h('section', { class: 'card', 'aria-labelledby': 'pick-seats' },
      h('h2', { id: 'pick-seats' }, `Choose your seat${n > 1 ? 's' : ''}`),
      h('p', { class: 'muted' }, `Pick ${n} ${cls} seat${n > 1 ? 's' : ''} on the map (other classes are dimmed). Use the arrow keys to move between seats and Space to choose one.`),
      h('div', { class: 'seatmap-wrap' }, map.build(ctx.seatMap.seats)),
      count, alerts.el, button);
    map.setClass(b.fareClass);
    show();
    return { el, refresh };
  }

  const eventsBox = h('section', { 'aria-label': 'Events' });
  async function loadEvents() {
    const r = await api('GET', `/bookings/${id}/events`);
    eventsBox.replaceChildren(h('h2', {}, 'What happened'),
      h('p', { class: 'muted' }, `Times in ${zoneLabel(ctx.tz, place())}.`),
      h('ol', { class: 'events' }, r.events.map((e) => {
        // A refund event's data is the booking with the refund as its
        // "refund" member; events of an earlier release have the refund
        // as the whole data.
        const refund = e.type.startsWith('refund.') ? (typeof e.data?.refund === 'object' && e.data.refund ? e.data.refund : e.data) : null;
        return h('li', { dataset: { event: e.type } },
          h('strong', {}, eventWords(e.type, b.kind)), ' · ', h('time', { datetime: e.time }, dateTime(e.time, ctx.tz)),
          refund?.amount !== undefined ? ` · ${money(refund.amount, refund.currency)}` : '');
      })));
  }

  // reload redraws only when the booking changed, so that a person's focus
  // (on the Pay button, say) is not lost to a refresh.
  // A redraw puts the focus back where it was: on the control with the
  // same data-action, or (when that is gone, say Cancel after a
  // hand-over) on the status line, never on the page's body.
  async function reload() {
    const before = b;
    const next = await api('GET', `/bookings/${id}`);
    if (page.left || (next.version === before.version && next.status === before.status && next.refundStatus === before.refundStatus)) return;
    b = next;
    await loadEvents();
    if (page.left) return;
    const active = document.activeElement;
    const had = body.contains(active) && !seats?.el.contains(active) ? (active.dataset.action ? `[data-action="${active.dataset.action}"]` : '[data-status-line]') : null;
    draw();
    if (had && !body.contains(document.activeElement)) refocus(had);
    if (b.status !== before.status) announce(`The booking is now ${titleCase(b.status)}.`);
  }

  // settled is true once nothing will change the booking any more: it
  // ended (expired, completed, cancelled) with no refund still owed.
  const settled = () => ['EXPIRED', 'COMPLETED', 'CANCELLED'].includes(b.status) && b.refundStatus !== 'REQUESTED';

  // pay starts one charge: the button stays disabled while the attempt is
  // in flight, so a double click does not start a second one (with a key
  // of its own).
  async function pay(e) {
    const button = e.currentTarget;
    if (button.disabled) return;
    errors.clear();
    try {
      const p = await whileBusy(button, () => send('POST', `/bookings/${id}/payments`, undefined));
      button.disabled = true; // on the way to the checkout
      location.assign(p.checkoutUrl);
    } catch (err) {
      errors.error(err);
      reload();
    }
  }

  // extend asks for the one extension a hold may have; the server says no
  // (shown with its code) when it was extended already or a line waits.
  async function extend() {
    errors.clear();
    try {
      b = await api('POST', `/bookings/${id}/extend`);
      await loadEvents();
      draw();
      // The note that replaces More time has the focus the button had.
      refocus('[data-extended]');
      announce(`The hold now lasts until ${dateTime(b.holdExpiresAt, ctx.tz)}.`);
    } catch (err) {
      errors.error(err);
    }
  }

  async function move(what) {
    errors.clear();
    try {
      b = await api('POST', `/bookings/${id}/${what}`);
      await loadEvents();
      draw();
      refocus(`[data-action="${what === 'pickup' ? 'return' : 'pickup'}"]`);
      announce(`The booking is now ${titleCase(b.status)}.`);
    } catch (err) {
      errors.error(err);
    }
  }

  // refocus puts the focus, after a redraw took away the control that had
  // it, on sel or else on the status line (never on the page's body).
  function refocus(sel) {
    (body.querySelector(sel) || body.querySelector('[data-status-line]'))?.focus();
  }

  // askCancel shows what a cancellation now refunds, by the rule the
  // cancellation itself applies, and cancels only once that is confirmed.
  async function askCancel() {
    errors.clear();
    let q;
    try {
      q = await api('GET', `/bookings/${id}/refund-quote`);
    } catch (err) {
      errors.error(err);
      return;
    }
    const why = { unpaid: 'nothing was paid yet', seller: 'cancelled by the seller: refunded in full', policy: ruleWords(q, b.kind) }[q.rule] || q.rule;
    // The refund goes to the customer: a host or an admin cancelling is
    // told what the customer gets back.
    const own = me?.role === 'customer' && String(b.customerId) === me.sub;
    const unpaid = b.status === 'HELD' && q.rule === 'unpaid';
    // The question is a modal <dialog>: the page behind it is inert until
    // it is answered. Keeping the booking (the button, or Escape) closes it
    // and gives the focus back to the button that asked it.
    const close = () => {
      if (dialog.open) dialog.close();
      quote.clear();
      body.querySelector('[data-action="cancel"]')?.focus();
    };
    const keep = h('button', { type: 'button', class: 'secondary', dataset: { action: 'keep-booking' }, onclick: close }, 'Keep it');
    const dialog = h('dialog', {
      class: 'card question', role: 'dialog', 'aria-labelledby': 'cq', dataset: { refundQuote: String(q.refundAmount) },
      // Escape: the browser's cancel, closed our way (focus back on Cancel).
      oncancel: (e) => { e.preventDefault(); if (!dialog.dataset.busy) close(); },
      // Tab goes round the question's buttons, not out to the browser.
      onkeydown: (e) => {
        if (e.key !== 'Tab') return;
        const buttons = [...dialog.querySelectorAll('button:not([disabled])')];
        const at = buttons.indexOf(document.activeElement);
        const next = e.shiftKey ? (at <= 0 ? buttons.length - 1 : -1) : (at === buttons.length - 1 ? 0 : -1);
        if (next >= 0 && buttons.length) { e.preventDefault(); buttons[next].focus(); }
      },
    },
      // A hold was never paid: releasing it frees the seats and nothing
      // was charged, so there is no refund to speak of.
      unpaid ? h('h2', { id: 'cq' }, 'Release this hold?') : h('h2', { id: 'cq' }, 'Cancel this booking?'),
      unpaid ? h('p', {}, `The ${b.kind === 'car' ? 'car is' : 'seats are'} released at once. Nothing was charged${own ? ' to you' : ''}, so there is nothing to refund.`)
        : h('p', {}, own ? 'If you cancel now, you get back ' : 'If you cancel now, the customer gets back ', h('strong', {}, money(q.refundAmount, q.currency)), ` of ${money(q.amount, q.currency)} (${why}).`),
      h('div', { class: 'row' },
        h('button', { type: 'button', class: 'danger', dataset: { action: 'confirm-cancel' }, onclick: doCancel }, unpaid ? 'Yes, release' : 'Yes, cancel'),
        keep));
    quote.show(dialog);
    dialog.showModal();
    // The safe choice has the focus: Enter or Space keeps the booking.
    keep.focus();
  }

  // doCancel cancels once: the question's buttons are disabled while the
  // cancellation is in flight, so a double click sends one request. The
  // question then closes, and the focus goes to the new status (or to the
  // alert), not to the page's body.
  async function doCancel(e) {
    const question = e.currentTarget.closest('dialog');
    if (question.dataset.busy) return;
    question.dataset.busy = 'true';
    for (const button of question.querySelectorAll('button')) button.disabled = true;
    question.querySelector('[data-action="confirm-cancel"]').focus(); // kept while disabled
    const wasHeld = b.status === 'HELD';
    try {
      b = await api('POST', `/bookings/${id}/cancel`);
      question.close();
      quote.clear();
      await loadEvents();
      draw();
      refocus('[data-status-line]');
      announce(wasHeld ? 'Hold released: nothing was charged.' : `Cancelled. Refund: ${money(b.refundAmount || 0, b.currency)}.`);
    } catch (err) {
      question.close();
      quote.clear();
      errors.error(err);
      focusAlert(errors.el);
    }
  }

  await loadEvents();
  draw();
  page.cleanup(() => clearInterval(tick));
  // Changes arrive from elsewhere (a payment, an expiry, a hand-over, a
  // refund returned, a cancellation by the host or an admin): keep the
  // page current while the booking may still change. A hold is asked
  // every 2 s (its payment is awaited), any other booking that may change
  // every 12 s, and at once when the tab is shown again; a hidden tab and
  // a settled booking ask nothing.
  let asked = Date.now();
  const ask = async () => {
    asked = Date.now();
    await reload().catch(() => {});
    // The seat picker's map shows seats others take meanwhile.
    if (seats && !page.left) await seats.refresh().catch(() => {});
  };
  every(page, 2000, async () => {
    if (document.hidden || settled()) return;
    if (b.status === 'HELD' || Date.now() - asked >= 12000) await ask();
  });
  const shown = () => { if (!document.hidden && !settled()) ask(); };
  document.addEventListener('visibilitychange', shown);
  page.cleanup(() => document.removeEventListener('visibilitychange', shown));
}

// EVENT_WORDS says a booking's events in words (car bookings say
// "Picked up" and "Returned" for on_trip and completed).
const EVENT_WORDS = {
  'booking.held': 'Held', 'booking.confirmed': 'Paid: confirmed', 'booking.expired': 'Hold expired: not paid in time',
  'booking.cancelled': 'Cancelled', 'booking.extended': 'More time given', 'booking.seats_assigned': 'Seats assigned',
  'booking.on_trip': 'Picked up', 'booking.completed': 'Completed', 'refund.requested': 'Refund requested',
  'refund.completed': 'Refund paid', 'refund.succeeded': 'Refund paid', 'waitlist.offered': 'Offered from the waitlist',
};
export function eventWords(type, kind) {
  if (kind === 'car' && type === 'booking.completed') return 'Returned';
  return EVENT_WORDS[type] || type;
}

// offerOutcome says what became of a waitlist offer, from its booking.
export function offerOutcome(bk) {
  if (['CONFIRMED', 'ON_TRIP', 'COMPLETED'].includes(bk.status)) return 'Booked: the offer was paid';
  if (bk.status === 'CANCELLED' && bk.cancelReason === 'payment_failed') return 'Offer ended: payment failed';
  if (bk.status === 'CANCELLED') return 'Offer ended: cancelled';
  return 'Offer lapsed: not paid in time';
}

// ruleWords says which of the refund rule's tiers a quote applies: "50 %
// — cancelled 24–72 h before pick-up", "0 % — cancelled less than 24 h
// before departure", "0 % — this fare is not refundable".
export function ruleWords(q, kind) {
  const start = kind === 'car' ? 'pick-up' : 'departure';
  const hours = (s) => {
    const x = s / 3600;
    return Number.isInteger(x) ? String(x) : x.toFixed(1);
  };
  const a = q.noticeAtLeast, l = q.noticeLessThan;
  let when;
  if (a !== undefined && l !== undefined) when = `${hours(a)}–${hours(l)} h`;
  else if (a !== undefined) when = `at least ${hours(a)} h`;
  else if (l !== undefined) when = `less than ${hours(l)} h`;
  else return `${q.percent} % — ${kind === 'car' ? 'this booking is' : 'this fare is'} not refundable`;
  return `${q.percent} % — cancelled ${when} before ${start}`;
}

// context loads what a booking's page shows beside the booking: the flight
// and its airports, or the car and its zone.
async function context(b) {
  if (b.kind === 'flight') {
    // A booking without seats may be given some: it needs the seat map.
    const needsSeats = !b.seats?.length && (b.status === 'HELD' || b.status === 'CONFIRMED');
    const [flight, list, seatMap] = await Promise.all([api('GET', `/flights/${b.flightId}`).catch(() => null), airports(),
      needsSeats ? api('GET', `/flights/${b.flightId}/seats`).catch(() => null) : null]);
    const origin = flight ? list.get(flight.from) : null;
    return { flight, origin, tz: origin?.timeZone || 'UTC', seatMap: seatMap?.seats?.length ? seatMap : null };
  }
  const [car, list] = await Promise.all([api('GET', `/cars/${b.carId}`).catch(() => null), cities()]);
  const tz = car?.timeZone || 'UTC';
  return { car, tz, place: list.get(car?.city)?.name };
}
