// Customer, flights: search by route (date optional), then a flight's
// fares and seat map, choosing seats or a quantity, and the hold, through
// the waiting room when the flight is in a surge.
import { api, airports, send, claims } from './api.js';
import { h, slot, announce, every, field, focusAlert } from './ui.js';
import { money, dateTime, zoneLabel, titleCase } from './format.js';
import { SeatMap, classColour } from './seatmap.js';

function airportOptions(list, chosen) {
  return [...list.values()].map((a) => h('option', { value: a.code, selected: a.code === chosen }, `${a.code} · ${a.city}`));
}

// when shows an instant in an airport's zone, labelled with its city.
export function when(iso, airport) {
  const tz = airport?.timeZone || 'UTC';
  return h('span', {}, h('time', { datetime: iso }, dateTime(iso, tz)), ' ', h('span', { class: 'muted' }, `(${zoneLabel(tz, airport?.city)})`));
}

export async function searchPage(page) {
  page.title('Search flights');
  const q = page.url.searchParams;
  const list = await airports();
  const from = h('select', { name: 'from', id: 'from' }, airportOptions(list, q.get('from') || 'SGN'));
  const to = h('select', { name: 'to', id: 'to' }, airportOptions(list, q.get('to') || 'HAN'));
  const date = h('input', { type: 'date', name: 'date', value: q.get('date') || '' });
  const results = h('section', { 'aria-live': 'polite', 'aria-label': 'Flights found' });
  const errors = slot();
  page.main.append(
    h('h1', {}, 'Find a flight'),
    h('form', {
      class: 'row card', role: 'search',
      onsubmit: (e) => {
        e.preventDefault();
        const p = new URLSearchParams({ from: from.value, to: to.value });
        if (date.value) p.set('date', date.value);
        page.navigate(`/app/?${p}`);
      },
    }, field('From', from), field('To', to), field('Date (optional: next 7 days)', date), h('button', { type: 'submit' }, 'Search')),
    errors.el, results,
  );
  if (!q.get('from') || !q.get('to')) return;
  const p = new URLSearchParams({ from: q.get('from'), to: q.get('to') });
  if (q.get('date')) p.set('date', q.get('date'));
  try {
    const r = await api('GET', `/flights?${p}`);
    if (!r.flights.length) {
      results.append(h('p', {}, 'No flights on this route', q.get('date') ? ' that day.' : ' in the next 7 days.'));
      return;
    }
    results.append(h('h2', {}, `${r.flights.length} flight${r.flights.length > 1 ? 's' : ''}`),
      h('ul', { class: 'plain' }, r.flights.map((f) => h('li', {}, flightCard(f, list)))));
  } catch (err) {
    errors.error(err);
  }
}

function flightCard(f, list) {
  const o = list.get(f.from), d = list.get(f.to);
  return h('article', { class: 'card' },
    h('div', { class: 'flight-head' },
      h('h3', {}, h('a', { href: `/app/flights/${f.id}` }, `${f.code} ${f.from} → ${f.to}`)),
      h('a', { class: 'button', href: `/app/flights/${f.id}` }, 'Choose seats', h('span', { class: 'sr-only' }, ` on ${f.code}`))),
    h('p', {}, 'Departs ', when(f.departureAt, o), h('br'), 'Arrives ', when(f.arrivalAt, d)),
    h('ul', { class: 'legend' }, f.fares.map((fa) => h('li', {},
      h('span', { class: `swatch sw-${fa.fareClass}`, 'aria-hidden': 'true' }),
      `${titleCase(fa.fareClass)}: ${money(fa.price, fa.currency)} · `, fa.available ? `${fa.available} left` : h('strong', {}, 'sold out')))));
}

export async function flightPage(page, id) {
  page.title(`Flight ${id}`);
  const list = await airports();
  const [f, seatMap] = await Promise.all([api('GET', `/flights/${id}`), api('GET', `/flights/${id}/seats`)]);
  page.title(`${f.code} ${f.from} → ${f.to}`);
  const o = list.get(f.from), d = list.get(f.to);
  const errors = slot();
  const waiting = slot();
  let fare = (f.fares.find((x) => x.available > 0) || f.fares[0])?.fareClass;
  let mode = 'seats';
  const hasSeats = seatMap.seats.length > 0;
  // A departed flight sells nothing (its fares show sold out): the map is
  // shown, but no seat can be chosen and there is nothing to hold. The seat
  // map says whether the flight had departed when it was read (the
  // server's clock); between reads the browser's clock decides, on every
  // choice, Hold and map refresh (a page left open past the departure
  // turns departed then, even on a device whose clock is behind).
  let departed = seatMap.departed === true || Date.parse(f.departureAt) <= Date.now();
  if (!hasSeats) mode = 'quantity';

  const map = new SeatMap({
    classNames: Object.fromEntries(f.fares.map((x) => [x.fareClass, titleCase(x.fareClass)])),
    onToggle: (no, cls) => {
      if (checkDeparted()) return;
      if (cls !== fare) {
        fare = cls;
        map.setClass(cls);
        drawFares();
      }
      if (map.selected.has(no)) map.selected.delete(no);
      else if (map.selected.size >= 9) {
        announce('At most 9 seats at once.');
        return;
      } else map.selected.add(no);
      map.restyle();
      summary();
      announce(`Seat ${no} ${map.selected.has(no) ? 'selected' : 'unselected'}. ${map.selected.size} chosen.`);
    },
  });

  map.readOnly = departed;

  const fares = h('fieldset', { class: 'fares', disabled: departed });
  // left says what a fare class has for sale; a departed flight has
  // nothing for sale, whatever seats are empty.
  const left = (x) => (departed ? 'Closed: departed' : x.available ? `${x.available} left` : 'Sold out');
  function drawFares() {
    fares.replaceChildren(h('legend', {}, 'Fare class'), ...f.fares.map((x, i) => h('label', { class: `fare${x.fareClass === fare ? ' is-selected' : ''}` },
      h('input', {
        type: 'radio', name: 'fare', value: x.fareClass, checked: x.fareClass === fare,
        onchange: () => { fare = x.fareClass; map.setClass(fare); drawFares(); summary(); },
      }),
      h('span', {}, h('span', { class: `swatch sw-${x.fareClass}`, 'aria-hidden': 'true', dataset: { colour: classColour(x.fareClass, i) } }), titleCase(x.fareClass)),
      h('strong', {}, money(x.price, x.currency)),
      h('span', { class: 'muted', dataset: { available: x.fareClass } }, left(x)))));
  }
  drawFares();

  // The number of seats: a whole number from 1 to 9 (the API's limit).
  // What is wrong with it is said next to the field, tied to it
  // (aria-describedby), and Hold waits until it is right.
  const qtyWhy = h('p', { id: 'qty-why', class: 'muted', 'aria-live': 'polite' }, 'A whole number, 1 to 9.');
  const qty = h('input', { type: 'number', min: 1, max: 9, step: 1, value: 1, inputmode: 'numeric', 'aria-describedby': 'qty-why', oninput: () => summary() });
  function qtyProblem() {
    const v = qty.value.trim();
    if (v === '' || qty.validity.badInput) return 'Enter a number of seats: a whole number, 1 to 9.';
    const n = Number(v);
    if (!Number.isInteger(n)) return `Seats come whole: ${v} is not a whole number (1 to 9).`;
    if (n < 1) return 'At least 1 seat.';
    if (n > 9) return 'At most 9 seats at once: hold the rest in another booking.';
    return '';
  }
  const chosen = h('p', { 'aria-live': 'polite' });
  // busy is true while a hold is in flight or waits in the waiting room:
  // Hold stays disabled then (the map's refresh included), so a second
  // press cannot start another queue and more holds.
  let busy = false;
  const holdBtn = h('button', { type: 'button', dataset: { action: 'hold' }, onclick: () => { if (!busy) hold(); } }, 'Hold');
  const modeSeats = h('input', { type: 'radio', name: 'mode', value: 'seats', checked: mode === 'seats', disabled: !hasSeats, onchange: () => { mode = 'seats'; showMode(); } });
  const modeQty = h('input', { type: 'radio', name: 'mode', value: 'quantity', checked: mode === 'quantity', onchange: () => { mode = 'quantity'; showMode(); } });
  const mapBox = h('div', { class: 'seatmap-wrap' });
  const howBox = h('fieldset', { class: 'row', hidden: departed }, h('legend', {}, 'How to choose'),
    h('label', { class: 'inline' }, modeSeats, 'Pick seats on the map'),
    h('label', { class: 'inline' }, modeQty, 'Any seats: a number of seats'));
  const holdBox = h('div', { class: 'card', hidden: departed }, chosen, holdBtn);
  const keysHint = departed ? null : h('p', { class: 'muted' }, 'Use the arrow keys to move between seats and Space to choose one.');
  const departedNote = () => h('p', { class: 'notice', role: 'status', dataset: { departed: '' } }, 'This flight has departed: its seats can no longer be held.');
  const departedSlot = slot();
  if (departed) departedSlot.show(departedNote());
  const qtyBox = h('div', {}, field('Number of seats (assigned later)', qty), qtyWhy);

  function price() {
    return f.fares.find((x) => x.fareClass === fare);
  }
  function count() {
    if (mode === 'seats') return map.selected.size;
    return qtyProblem() ? 0 : Number(qty.value);
  }
  function summary() {
    const p = price();
    const n = count();
    const problem = mode === 'quantity' ? qtyProblem() : '';
    qtyWhy.textContent = problem || 'A whole number, 1 to 9.';
    qtyWhy.className = problem ? 'field-error' : 'muted';
    if (problem) qty.setAttribute('aria-invalid', 'true');
    else qty.removeAttribute('aria-invalid');
    const seats = mode === 'seats' && n ? ` (${[...map.selected].sort().join(', ')})` : '';
    const closed = isClosed(fare);
    chosen.textContent = closed ? `${titleCase(fare)} is sold out: nothing to hold.`
      : n ? `${n} × ${titleCase(fare)}${seats}: ${money(p.price * n, p.currency)}`
        : problem ? `Hold waits for a number of seats: ${problem}` : 'Choose seats on the map, or a number of seats.';
    holdBtn.disabled = busy || closed || n < 1 || n > 9;
    syncSoldOut();
  }

  // isClosed is true when fare class cls has nothing left for sale (its
  // card says "Sold out"): its seats cannot be chosen and Hold waits; the
  // waitlist is offered instead.
  function isClosed(cls) {
    return !departed && f.fares.find((x) => x.fareClass === cls)?.available === 0;
  }
  const closedClasses = () => f.fares.filter((x) => isClosed(x.fareClass)).map((x) => x.fareClass);

  // syncSoldOut offers the chosen class's waitlist while it is sold out,
  // and takes the offer back once it has seats again.
  function syncSoldOut() {
    if (isClosed(fare)) {
      if (joined.has(fare) || claims()?.role !== 'customer') return;
      if (offer?.dataset.soldOut === fare && waiting.el.contains(offer)) {
        if (offer.dataset.fixed === undefined) offer.querySelector('[data-wanted]').textContent = String(wanted());
        return;
      }
      if (!busy) offerWaitlist(fare);
    } else if (offer && !soldOut && waiting.el.contains(offer)) {
      const hadFocus = offer.contains(document.activeElement);
      waiting.clear();
      offer = null;
      if (hadFocus) holdBtn.focus();
    }
  }

  // wanted is how many seats a waitlist place asks for: the seats chosen,
  // or the number typed (1 when neither says).
  function wanted() {
    const n = count();
    return n >= 1 && n <= 9 ? n : 1;
  }
  function showMode() {
    mapBox.hidden = departed ? !hasSeats : mode !== 'seats';
    qtyBox.hidden = mode !== 'quantity' || departed;
    summary();
  }

  // checkDeparted switches the page to its departed state once the
  // departure has passed by the browser's clock, or serverSays (a seat map
  // read said so), and reports whether it has.
  function checkDeparted(serverSays = false) {
    if (departed) return true;
    if (!serverSays && Date.parse(f.departureAt) > Date.now()) return false;
    departed = true;
    map.readOnly = true;
    map.selected.clear();
    map.restyle();
    fares.disabled = true;
    drawFares();
    drawLegend();
    errors.clear();
    soldOut = null;
    offer = null;
    howBox.hidden = true;
    holdBox.hidden = true;
    keysHint?.remove();
    departedSlot.show(departedNote());
    showMode();
    announce('This flight has departed: its seats can no longer be held.');
    return true;
  }

  async function hold(extraHeaders = {}) {
    errors.clear();
    soldOut = null;
    if (checkDeparted()) {
      busy = false;
      waiting.clear();
      return;
    }
    if (!claims()) {
      busy = false;
      summary();
      errors.show(h('div', { class: 'alert', role: 'alert' }, 'Sign in to hold seats. ', h('a', { href: '/app/signin' }, 'Sign in'), ' · Code: ', h('code', {}, 'unauthenticated')));
      return;
    }
    const body = { flightId: f.id, fareClass: fare };
    if (mode === 'seats') body.seats = [...map.selected].sort();
    else body.quantity = Number(qty.value);
    busy = true;
    holdBtn.disabled = true;
    try {
      const b = await send('POST', '/bookings', body, extraHeaders);
      page.navigate(`/app/bookings/${b.bookingId}`);
    } catch (err) {
      if (err.code === 'waiting_room') {
        waitInRoom(err.problem.ticket, err.problem.position);
        return;
      }
      refused(err);
      if (err.code === 'sold_out') soldOut = body.fareClass;
      if (err.code === 'sold_out' && claims()?.role === 'customer') offerWaitlist(body.fareClass, mode === 'seats' ? body.seats.length : body.quantity);
      if (err.code === 'seat_unavailable' || err.code === 'sold_out') await refresh().catch(() => {});
    }
  }

  // soldOut is the fare class a shown sold_out alert is about (null when
  // none is shown): the refresh clears the alert once the class has seats
  // again (an overbook limit raised, a hold released).
  let soldOut = null;
  let offer = null;
  // joined holds the classes whose line this page joined.
  const joined = new Set();

  // refused shows why a hold (or its wait in the room) ended without one,
  // and gives Hold back. Hold was disabled, which took the focus from it:
  // the focus goes to the alert that says why, not to the page's body.
  function refused(err) {
    busy = false;
    summary();
    errors.error(err);
    focusAlert(errors.el);
  }

  // offerWaitlist lets a customer who found the class sold out join its
  // line for the same number of seats: freed seats are offered in line
  // order, as a hold with its own countdown.
  function offerWaitlist(fareClass, fixed) {
    const join = async () => {
      const quantity = fixed ?? wanted();
      try {
        const e = await api('POST', `/flights/${f.id}/waitlist`, { body: { fareClass, quantity } });
        errors.clear(); // the sold_out that led here is answered
        soldOut = null;
        offer = null;
        joined.add(fareClass);
        if (e.status === 'OFFERED') {
          page.navigate(`/app/bookings/${e.bookingId}`);
          return;
        }
        // The button is gone: the focus goes to what it did.
        const result = h('div', { class: 'notice', role: 'status', tabindex: '-1', dataset: { waitlistStatus: e.status } });
        myPlace = { id: e.waitlistId, el: result, quantity, fareClass };
        showPlace(e);
        waiting.show(result);
        result.focus();
        announce(`On the waitlist: number ${e.position} in line.`);
      } catch (err) {
        waiting.clear();
        errors.error(err);
        focusAlert(errors.el);
      }
    };
    offer = h('div', { class: 'notice', dataset: fixed === undefined ? { soldOut: fareClass } : { soldOut: fareClass, fixed: String(fixed) } }, `${titleCase(fareClass)} is sold out for `,
      h('span', { dataset: { wanted: '' } }, String(fixed ?? wanted())), ' seat(s). ',
      h('button', { type: 'button', dataset: { action: 'join-waitlist' }, onclick: join }, 'Join the waitlist'),
      ' When seats come free they are held for you, in line order.');
    waiting.show(offer);
  }

  // myPlace is this page's place in a line once joined: the map's refresh
  // asks the waitlist too, so the line says when it moves, when seats are
  // offered (held for the customer) or when the offer ended.
  let myPlace = null;
  function showPlace(e) {
    const { el, quantity, fareClass } = myPlace;
    const what = `${quantity} ${titleCase(fareClass)} seat(s)`;
    const mine = h('a', { href: '/app/bookings' }, 'My bookings');
    el.dataset.waitlistStatus = e.status;
    if (e.status === 'WAITING') {
      el.replaceChildren(`You are number ${e.position} in line for ${what}. `, 'When seats come free they are held for you and shown under ', mine, '.');
    } else if (e.status === 'OFFERED') {
      el.replaceChildren(`Seats came free: ${what} are held for you. `,
        h('a', { href: `/app/bookings/${e.bookingId}`, dataset: { action: 'offer' } }, 'Pay before the offer lapses'), '.');
    } else if (e.status === 'DONE') {
      el.replaceChildren(`Your place in line for ${what} has ended: see `, mine, '.');
    } else {
      el.replaceChildren(`You left the line for ${what}.`);
    }
  }
  async function refreshPlace() {
    if (!myPlace || !waiting.el.contains(myPlace.el)) return;
    const r = await api('GET', '/waitlist');
    const e = r.waitlist.find((x) => x.waitlistId === myPlace.id);
    if (!e || page.left) return;
    const was = myPlace.el.dataset.waitlistStatus;
    const text = myPlace.el.textContent;
    showPlace(e);
    if (e.status !== was && e.status === 'OFFERED') announce(`Seats came free: ${myPlace.quantity} held for you. Pay before the offer lapses.`);
    else if (myPlace.el.textContent !== text && e.status === 'WAITING') announce(`Now number ${e.position} in line.`);
  }

  // waitInRoom shows the queue and goes on by itself once admitted: the
  // selection stays as it is, and the hold is sent again with the
  // admission token.
  async function waitInRoom(ticket, position) {
    const pos = h('strong', {});
    const eta = h('span', {}, 'estimating…');
    const line = h('p', {});
    // Place 0 is nobody ahead: the turn has come, the token is on its way.
    const place = (n) => {
      if (n > 0) {
        pos.textContent = String(n);
        line.replaceChildren('Your place in line: ', pos, '. Estimated wait: ', eta);
      } else line.replaceChildren(h('strong', {}, 'You are next: your turn has come.'));
    };
    place(position);
    waiting.show(h('div', { class: 'waiting', role: 'status', dataset: { waitingRoom: '' } },
      h('h2', {}, 'You are in the waiting room'),
      line,
      h('p', {}, 'Keep this page open: your seats stay selected, and the hold goes on by itself when it is your turn.')));
    announce(position > 0 ? `Waiting room: number ${position} in line.` : 'Waiting room: you are next.');
    holdBtn.disabled = true;
    const start = { t: Date.now(), p: position };
    // The room is asked every second, or after the Retry-After of a
    // rate_limited or overloaded answer (asking sooner would only be
    // refused again, and adds to the load that refused it).
    let wait = 1000;
    while (!page.left) {
      await new Promise((r) => setTimeout(r, wait));
      wait = 1000;
      let st;
      try {
        st = await api('GET', `/waiting-room/${encodeURIComponent(ticket)}`);
      } catch (err) {
        if ((err.code === 'rate_limited' || err.code === 'overloaded') && err.retryAfter > 0) wait = Math.max(wait, err.retryAfter * 1000);
        if (err.code === 'not_found') { // the ticket expired: queue again
          waiting.clear();
          return hold();
        }
        if (err.code === 'network_error' || err.code === 'overloaded' || err.code === 'rate_limited') continue;
        waiting.clear();
        refused(err);
        return;
      }
      if (st.admitted) {
        waiting.show(h('div', { class: 'notice', role: 'status' }, 'It is your turn: holding your seats…'));
        announce('Admitted. Holding your seats.');
        await hold({ 'Waiting-Room-Token': st.token });
        waiting.clear();
        return;
      }
      place(st.position);
      const rate = (start.p - st.position) / ((Date.now() - start.t) / 1000);
      eta.textContent = rate > 0 ? `about ${Math.max(1, Math.round(st.position / rate))} s.` : 'estimating…';
    }
  }

  async function refresh() {
    const [nf, sm] = await Promise.all([api('GET', `/flights/${id}`), api('GET', `/flights/${id}/seats`)]);
    if (page.left) return;
    f.fares = nf.fares;
    if (sm.departed) checkDeparted(true);
    const lost = [...map.update(sm.seats), ...map.setClosed(closedClasses())];
    drawLegend();
    if (lost.length) announce(`Seat${lost.length > 1 ? 's' : ''} ${lost.join(', ')} just went to someone else.`);
    for (const x of f.fares) {
      const el = fares.querySelector(`[data-available="${x.fareClass}"]`);
      if (el) el.textContent = left(x);
    }
    // A sold_out shown earlier is stale once its class has seats again.
    const back = soldOut && f.fares.find((x) => x.fareClass === soldOut)?.available > 0;
    if (back && !departed) {
      const hadFocus = errors.el.contains(document.activeElement) || offer?.contains(document.activeElement);
      errors.clear();
      if (offer && waiting.el.contains(offer)) waiting.clear();
      offer = null;
      announce(`${titleCase(soldOut)} has seats again.`);
      soldOut = null;
      if (hadFocus) holdBtn.focus();
    }
    summary();
  }

  page.main.append(
    h('p', {}, h('a', { href: `/app/?from=${f.from}&to=${f.to}` }, `← Flights ${f.from} → ${f.to}`)),
    h('h1', {}, `${f.code} ${o?.city || f.from} → ${d?.city || f.to}`),
    h('p', {}, 'Departs ', when(f.departureAt, o), h('br'), 'Arrives ', when(f.arrivalAt, d)),
    departedSlot.el,
    fares,
    howBox,
    mapBox, qtyBox,
    holdBox, waiting.el, errors.el,
  );
  // The legend: a departed flight's empty seats are not "available".
  const legend = h('ul', { class: 'legend', 'aria-label': 'Legend' });
  function drawLegend() {
    legend.replaceChildren(
      ...f.fares.map((x) => h('li', {}, h('span', { class: `swatch sw-${x.fareClass}`, 'aria-hidden': 'true' }), departed ? `${titleCase(x.fareClass)} (not for sale: departed)` : isClosed(x.fareClass) ? `${titleCase(x.fareClass)} (sold out: join the waitlist)` : `${titleCase(x.fareClass)} (available)`)),
      departed ? '' : h('li', {}, h('span', { class: 'swatch sw-SELECTED', 'aria-hidden': 'true' }), 'Selected'),
      h('li', {}, h('span', { class: 'swatch sw-HELD', 'aria-hidden': 'true' }), 'Held'),
      h('li', {}, h('span', { class: 'swatch sw-SOLD', 'aria-hidden': 'true' }), 'Sold'));
  }
  drawLegend();
  mapBox.append(h('h2', {}, 'Seat map'), legend, keysHint || '');
  if (hasSeats) mapBox.append(map.build(seatMap.seats));
  map.setClosed(closedClasses());
  map.setClass(fare);
  showMode();
  // The map refreshes while it is open, so seats others take turn HELD.
  // Each refresh also checks the departure.
  every(page, 3000, () => (checkDeparted() ? Promise.resolve() : Promise.all([refresh().catch(() => {}), refreshPlace().catch(() => {})])));
}
