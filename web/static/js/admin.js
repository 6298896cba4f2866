// Admin: flights with live counters per fare class, overbooking limits,
// waiting rooms, the event backlog and consumer lag, and the last audit.
import { api, airports, claims } from './api.js';
import { h, slot, every, field } from './ui.js';
import { dateTime, titleCase } from './format.js';

// MAX_OVERBOOK is the largest overbook limit the API takes (as a fare
// class's capacity).
const MAX_OVERBOOK = 1000;

// LIMIT_WORDS says the overbook form's refusals in its own terms (the
// general words for invalid_state are about a booking).
const LIMIT_WORDS = { invalid_state: 'The limit cannot go below what is already sold and held.' };

export async function adminPage(page) {
  page.title('Admin');
  page.main.append(h('h1', {}, 'Operations'));
  const me = claims();
  if (!me || me.role !== 'admin') {
    page.main.append(h('p', {}, 'This page is for admins. ', h('a', { href: '/app/signin' }, 'Sign in'), ' as an admin.'));
    return;
  }
  const list = await airports();
  const q = page.url.searchParams;
  const errors = slot();
  const from = h('input', { value: q.get('from') || '', maxlength: 3, size: 4, pattern: '[A-Za-z]{3}' });
  const to = h('input', { value: q.get('to') || '', maxlength: 3, size: 4, pattern: '[A-Za-z]{3}' });
  const date = h('input', { type: 'date', value: q.get('date') || '' });
  const flightsBox = h('section', { 'aria-label': 'Flights' });
  const eventsBox = h('section', { 'aria-labelledby': 'ev' });
  const auditBox = h('section', { 'aria-labelledby': 'au' });
  const cards = new Map();

  function flightCard(f) {
    const o = list.get(f.from);
    const counters = h('tbody');
    const roomOn = h('input', { type: 'checkbox', checked: f.waitingRoom.enabled });
    const rate = h('input', { type: 'number', min: 1, max: 100000, value: f.waitingRoom.admitPerSecond || 50 });
    const queued = h('span', { dataset: { queued: '' } });
    const msg = slot();
    const card = h('article', { class: 'card', dataset: { flight: String(f.id) } },
      h('h3', {}, `${f.code} ${f.from} → ${f.to} `, h('span', { class: 'muted' }, `#${f.id}`)),
      h('p', {}, h('time', { datetime: f.departureAt }, dateTime(f.departureAt, o?.timeZone || 'UTC')), ' ', h('span', { class: 'muted' }, `(${o?.city || f.from} time)`)),
      h('div', { class: 'table-scroll' }, h('table', { class: 'counters' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Class'), h('th', { class: 'num' }, 'Cap.'), h('th', { class: 'num' }, 'Sold'),
          h('th', { class: 'num' }, 'Held'), h('th', { class: 'num' }, 'Left'), h('th', {}, 'Overbook limit'))),
        counters)),
      h('form', {
        class: 'inline',
        onsubmit: async (e) => {
          e.preventDefault();
          msg.clear();
          try {
            const body = { waitingRoom: { enabled: roomOn.checked } };
            if (rate.value) body.waitingRoom.admitPerSecond = Number(rate.value);
            await api('PATCH', `/admin/flights/${f.id}`, { body });
            msg.show(h('span', { role: 'status', class: 'ok' }, 'Saved.'));
            await refresh();
          } catch (err) {
            msg.error(err);
          }
        },
      }, h('label', { class: 'inline' }, roomOn, 'Waiting room on'), h('label', { class: 'inline' }, 'admits', rate, 'per second'),
      h('button', { type: 'submit', class: 'secondary', dataset: { action: 'waiting-room' } }, 'Save'), ' ', queued),
      msg.el);
    const fareInputs = new Map();
    // limits holds each class's current limit (the server's), put back in
    // its field when a change is refused.
    const limits = new Map();
    function draw(nf) {
      queued.textContent = nf.waitingRoom.enabled ? `${nf.waitingRoom.queued} waiting` : '';
      for (const fa of nf.fares) {
        let row = counters.querySelector(`[data-fare="${fa.fareClass}"]`);
        if (!row) {
          const limit = h('input', { type: 'number', min: 0, max: MAX_OVERBOOK, value: fa.overbookLimit, 'aria-label': `Overbook limit of ${titleCase(fa.fareClass)}` });
          fareInputs.set(fa.fareClass, limit);
          row = h('tr', { dataset: { fare: fa.fareClass } },
            h('th', { scope: 'row' }, h('span', { class: `swatch sw-${fa.fareClass}`, 'aria-hidden': 'true' }), titleCase(fa.fareClass)),
            h('td', { class: 'num', dataset: { n: 'capacity' } }), h('td', { class: 'num', dataset: { n: 'sold' } }),
            h('td', { class: 'num', dataset: { n: 'held' } }), h('td', { class: 'num', dataset: { n: 'available' } }),
            h('td', {}, h('form', {
              class: 'inline',
              onsubmit: async (e) => {
                e.preventDefault();
                msg.clear();
                try {
                  await api('PATCH', `/admin/flights/${f.id}/fares/${fa.fareClass}`, { body: { overbookLimit: Number(limit.value) } });
                  msg.show(h('span', { role: 'status', class: 'ok' }, `${titleCase(fa.fareClass)}: overbook limit now ${limit.value}.`));
                  await refresh();
                } catch (err) {
                  msg.error(err, LIMIT_WORDS);
                  limit.value = String(limits.get(fa.fareClass));
                }
              },
            }, limit, h('button', { type: 'submit', class: 'secondary', dataset: { action: 'overbook' } }, 'Set'))));
          counters.append(row);
        }
        limits.set(fa.fareClass, fa.overbookLimit);
        for (const k of ['capacity', 'sold', 'held', 'available']) row.querySelector(`[data-n="${k}"]`).textContent = String(fa[k]);
      }
    }
    draw(f);
    return { card, draw };
  }

  async function loadFlights() {
    const p = new URLSearchParams({ limit: '20' });
    if (from.value) p.set('from', from.value.toUpperCase());
    if (to.value) p.set('to', to.value.toUpperCase());
    if (date.value) p.set('date', date.value);
    const r = await api('GET', `/admin/flights?${p}`);
    cards.clear();
    flightsBox.replaceChildren(...(r.flights.length ? r.flights.map((f) => {
      const c = flightCard(f);
      cards.set(f.id, c);
      return c.card;
    }) : [h('p', {}, 'No flights match.')]));
  }

  // refresh updates the counters in place (inputs being edited keep their
  // values and focus).
  async function refresh() {
    await Promise.all([...cards.keys()].map(async (id) => {
      const f = await api('GET', `/admin/flights/${id}`);
      cards.get(id)?.draw(f);
    }));
  }

  async function loadEvents() {
    const r = await api('GET', '/admin/events');
    eventsBox.replaceChildren(h('h2', { id: 'ev' }, 'Events'),
      h('p', { dataset: { backlog: String(r.backlog) } }, `Backlog: ${r.backlog} unpublished event${r.backlog === 1 ? '' : 's'}`,
        r.backlog ? `, the oldest ${r.oldestSeconds.toFixed(1)} s old` : '', '.'),
      h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'Consumer'), h('th', { class: 'num' }, 'Parked'), h('th', { class: 'num' }, 'Lag'))),
        h('tbody', {}, r.consumers.map((c) => h('tr', {}, h('td', {}, c.name), h('td', { class: 'num' }, String(c.parked)), h('td', { class: 'num' }, `${c.lagSeconds.toFixed(1)} s`))))));
  }

  async function loadAudit() {
    const run = h('button', { type: 'button', class: 'secondary', dataset: { action: 'audit' }, onclick: runAudit }, 'Run the audit now');
    // Before any audit the API answers ranAt null (200, not an error).
    const a = await api('GET', '/admin/audit');
    const body = a.ranAt ? auditResult(a) : h('p', { dataset: { auditNone: '' } }, 'No audit has run yet.');
    auditBox.replaceChildren(h('h2', { id: 'au' }, 'Last audit'), body, run);
  }

  async function runAudit() {
    errors.clear();
    try {
      await api('POST', '/admin/audit');
      await loadAudit();
    } catch (err) {
      errors.error(err);
    }
  }

  function auditResult(a) {
    return h('div', { dataset: { auditOk: String(a.ok) } },
      h('p', {}, a.ok ? h('strong', { class: 'ok' }, 'All invariants hold') : h('strong', {}, 'Invariants violated'), ' · ran ', h('time', { datetime: a.ranAt }, dateTime(a.ranAt, 'UTC'))),
      h('ul', { class: 'plain' }, a.results.map((r) => h('li', {}, `${r.ok ? '✓' : '✗'} ${r.id} `, h('span', { class: 'muted' }, r.name), r.ok ? '' : ` (${r.count} violations)`))));
  }

  page.main.append(
    h('form', {
      class: 'row card',
      onsubmit: (e) => {
        e.preventDefault();
        const p = new URLSearchParams();
        if (from.value) p.set('from', from.value.toUpperCase());
        if (to.value) p.set('to', to.value.toUpperCase());
        if (date.value) p.set('date', date.value);
        page.navigate(`/app/admin?${p}`);
      },
    }, field('From', from), field('To', to), field('Date', date), h('button', { type: 'submit' }, 'Show flights')),
    errors.el, h('h2', {}, 'Flights'), flightsBox, eventsBox, auditBox);
  await Promise.all([loadFlights(), loadEvents(), loadAudit()]);
  every(page, 3000, async () => {
    try {
      await Promise.all([refresh(), loadEvents()]);
    } catch (err) {
      errors.error(err);
    }
  });
}
