// Host: my cars, listing a new car, my cars' bookings, and handing cars
// over and taking them back.
import { api, claims, cities } from './api.js';
import { h, slot, field, announce, errorBox, moreButton, whileBusy, focusAlert, signinHref } from './ui.js';
import { money, titleCase, minorDigits, toMinor } from './format.js';
import { bookingRow, pagedBookings } from './bookings.js';

// CARS_PAGE is how many of the host's cars are loaded at a time.
const CARS_PAGE = 50;

export async function hostPage(page) {
  page.title('Host');
  page.main.append(h('h1', {}, 'My cars'));
  const me = claims();
  if (!me || (me.role !== 'host' && me.role !== 'admin')) {
    page.main.append(h('p', {}, 'This page is for hosts. ', h('a', { href: signinHref() }, 'Sign in'), ' as a host.'));
    return;
  }
  const errors = slot();
  const carsBox = h('section', { 'aria-label': 'Cars' });
  const bookingsBox = h('section', { 'aria-label': 'Bookings of my cars' });
  const status = h('select', { onchange: () => loadBookings().catch((err) => errors.error(err)) },
    ['', 'HELD', 'CONFIRMED', 'ON_TRIP', 'COMPLETED', 'CANCELLED', 'EXPIRED'].map((s) => h('option', { value: s }, s || 'any')));

  // The API pages the host's cars like a search (nextAfter): "More cars"
  // appends the next page while there may be one.
  const moreCars = moreButton('More cars', 'more-cars', () => loadCars(true).catch((err) => errors.error(err)));
  let carsAfter = '';
  async function loadCars(next = false) {
    const p = new URLSearchParams({ limit: String(CARS_PAGE) });
    if (next && carsAfter) p.set('after', carsAfter);
    const r = await whileBusy(moreCars, () => api('GET', `/host/cars?${p}`));
    const rows = r.cars.map((c) => h('tr', { dataset: { car: String(c.id) } },
      h('td', {}, h('a', { href: `/app/cars/${c.id}` }, c.model)), h('td', {}, c.plate), h('td', { class: 'hide-narrow' }, c.city),
      h('td', { class: 'num' }, money(c.dailyPrice, c.currency))));
    let body = carsBox.querySelector('tbody');
    if (!next || !body) {
      body = h('tbody');
      carsBox.replaceChildren(rows.length ? h('table', {},
        h('thead', {}, h('tr', {}, h('th', {}, 'Car'), h('th', {}, 'Plate'), h('th', { class: 'hide-narrow' }, 'City'), h('th', { class: 'num' }, 'Per day'))),
        body) : h('p', {}, 'No cars listed yet.'), moreCars);
    }
    body.append(...rows);
    carsAfter = r.nextAfter ? String(r.nextAfter) : '';
    moreCars.hidden = !carsAfter;
    if (next && rows.length) rows[0].querySelector('a').focus();
  }

  async function loadBookings() {
    const p = {};
    if (status.value) p.status = status.value;
    const list = await pagedBookings('/host/bookings', p, actions);
    bookingsBox.replaceChildren(list.count() ? list.el : h('p', {}, 'No bookings.'));
  }

  // A hand-over redraws its own row: the older pages loaded stay. Its
  // error is shown in a row right under it, where the person is looking
  // (the page's alert slot sits above the table, maybe far off screen).
  let rowError = null;
  function actions(b) {
    const move = (what) => async (e) => {
      errors.clear();
      rowError?.remove();
      rowError = null;
      const row = e.currentTarget.closest('tr');
      try {
        const nb = await api('POST', `/bookings/${b.bookingId}/${what}`);
        const fresh = bookingRow(nb, actions);
        row.replaceWith(fresh);
        (fresh.querySelector('button') || fresh.querySelector('a')).focus();
        announce(`Booking ${nb.bookingId} is now ${titleCase(nb.status)}.`);
      } catch (err) {
        rowError = h('tr', { class: 'row-error' }, h('td', { colspan: String(row.cells.length) }, errorBox(err)));
        row.after(rowError);
        rowError.scrollIntoView({ block: 'nearest' });
        // The focus stays on the button pressed (still there): the alert,
        // right under it, is announced.
      }
    };
    if (b.status === 'CONFIRMED') return h('button', { type: 'button', dataset: { action: 'pickup', booking: String(b.bookingId) }, onclick: move('pickup') }, 'Hand over');
    if (b.status === 'ON_TRIP') return h('button', { type: 'button', dataset: { action: 'return', booking: String(b.bookingId) }, onclick: move('return') }, 'Take back');
    return '';
  }

  // Every field's starting value is its default (an attribute, strings
  // only: a number would set the value alone), so that the form's reset
  // after a listing puts every field back the same way: plate and model
  // empty, the rest as they started. The city is one of those berth rents
  // cars in (GET /cities); amounts are typed in the currency's major unit
  // (45.00 for EUR 45, 800000 for VND, which has no minor unit) and sent
  // in minor units.
  const cityList = await cities();
  const plate = h('input', { name: 'plate', required: true, maxlength: 20, placeholder: '30A-123.45' });
  const model = h('input', { name: 'model', required: true, maxlength: 100 });
  const city = h('select', { name: 'city', required: true },
    [...cityList.values()].map((c) => h('option', { value: c.code, selected: c.code === 'HN' ? 'selected' : undefined }, `${c.name} (${c.code})`)));
  const currency = h('input', { name: 'currency', required: true, value: 'VND', pattern: '[A-Za-z]{3}', maxlength: 3 });
  const daily = h('input', { name: 'dailyPrice', type: 'number', required: true, min: '0', value: '800000', 'aria-describedby': 'money-unit' });
  const deposit = h('input', { name: 'deposit', type: 'number', required: true, min: '0', value: '5000000', 'aria-describedby': 'money-unit' });
  const unit = h('p', { class: 'muted', id: 'money-unit' });
  // The amounts' step follows the currency: 1 for VND, 0.01 for EUR.
  const showUnit = () => {
    const cur = currency.value.toUpperCase();
    const d = minorDigits(cur);
    for (const f of [daily, deposit]) f.step = d === null ? 'any' : String(1 / 10 ** d);
    unit.textContent = d === null ? 'Amounts in the currency\'s usual unit.'
      : d === 0 ? `Amounts in whole ${cur} (${cur} has no smaller unit).` : `Amounts in ${cur}, with up to ${d} decimals (for example ${(45).toFixed(d)}).`;
  };
  currency.addEventListener('input', showUnit);
  const turnaround = h('input', { name: 'turnaround', value: '2h', pattern: '[0-9hm]+' });
  const added = slot();
  const submit = h('button', { type: 'submit' }, 'List the car');
  const form = h('form', {
    class: 'card stack',
    // A reset changes the fields only after this event: the unit follows.
    onreset: () => setTimeout(showUnit),
    onsubmit: async (e) => {
      e.preventDefault();
      if (submit.disabled) return;
      added.clear();
      const cur = currency.value.toUpperCase();
      const [price, dep] = [toMinor(daily.value, cur), toMinor(deposit.value, cur)];
      if (Number.isNaN(price) || Number.isNaN(dep)) {
        added.show(h('div', { class: 'alert', role: 'alert' }, `Write the price and the deposit in ${cur}, with at most ${minorDigits(cur) ?? 0} decimals. `,
          h('span', { class: 'muted' }, 'Code: ', h('code', {}, 'validation_failed'))));
        focusAlert(added.el);
        return;
      }
      try {
        const c = await whileBusy(submit, () => api('POST', '/host/cars', {
          body: { plate: plate.value, model: model.value, city: city.value, dailyPrice: price,
            deposit: dep, currency: cur, turnaround: turnaround.value },
        }));
        // Listed: the form starts again from its defaults, and says what
        // was listed, with the new car's number and a link to its page.
        form.reset();
        added.show(h('p', { class: 'notice', role: 'status', dataset: { listedCar: String(c.id) } },
          `Listed ${c.model} (${c.plate}) as car ${c.id}: `, h('a', { href: `/app/cars/${c.id}` }, `see car ${c.id}`), '.'));
        announce(`Listed ${c.model} as car ${c.id}.`);
        await loadCars();
      } catch (err) {
        added.error(err);
        // Refused: the focus goes to why, not to the body.
        focusAlert(added.el);
      }
    },
  }, h('h2', {}, 'List a car'),
  h('div', { class: 'row' }, field('Plate', plate), field('Model', model), field('City', city)),
  h('div', { class: 'row' }, field('Currency', currency), field('Price a day', daily), field('Deposit', deposit), field('Turnaround', turnaround)),
  unit, submit, added.el);
  showUnit();

  page.main.append(carsBox, form, h('h2', {}, 'Bookings of my cars'), h('div', { class: 'row' }, field('Status', status)), errors.el, bookingsBox);
  await Promise.all([loadCars(), loadBookings()]);
}
