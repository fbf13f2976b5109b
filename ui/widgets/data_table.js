// A table drawn as plain HTML in the app's own page (no iframe, no data grid to load): a click on a column's name
// sorts the rows by it, a second click the other way. Numbers sort as numbers, empty cells last; long tables scroll
// under a header that stays in view. The cells' text comes formatted from data_table.py.
class SortableTable {
  constructor(parentElement) {
    this.wrapper = document.createElement("div");
    this.wrapper.className = "attn-table";
    parentElement.appendChild(this.wrapper);
    this.sorted = null; // { column, descending } once a column's name has been clicked
  }

  show(data) {
    this.data = data;
    this.order = data.rows.map((_, i) => i);
    if (this.sorted !== null && this.sorted.column < data.columns.length) this.#sort();
    else this.sorted = null;
    this.#render();
  }

  sortBy(column) {
    const again = this.sorted?.column === column;
    this.sorted = { column, descending: again ? !this.sorted.descending : false };
    this.#sort();
    this.#render();
  }

  #sort() {
    const { column, descending } = this.sorted;
    const value = (i) => this.data.rows[i][column];
    const compare = (a, b) => {
      const x = value(a);
      const y = value(b);
      if (x === null || y === null) return (x === null) - (y === null); // empty cells last either way
      const numbers = typeof x === "number" && typeof y === "number";
      const order = numbers ? x - y : String(x).localeCompare(String(y), undefined, { numeric: true });
      return descending ? -order : order;
    };
    this.order = this.data.rows.map((_, i) => i).sort((a, b) => compare(a, b) || a - b);
  }

  #render() {
    const { columns, text, numeric, links } = this.data;
    const table = document.createElement("table");
    const head = table.createTHead().insertRow();
    columns.forEach((name, c) => {
      const cell = document.createElement("th");
      cell.scope = "col";
      if (numeric[c]) cell.className = "number";
      const sorted = this.sorted?.column === c;
      cell.setAttribute("aria-sort", sorted ? (this.sorted.descending ? "descending" : "ascending") : "none");
      const button = document.createElement("button");
      button.type = "button";
      button.textContent = name + (sorted ? (this.sorted.descending ? " ▼" : " ▲") : "");
      button.title = `Sort by ${name}`;
      button.addEventListener("click", () => this.sortBy(c));
      cell.appendChild(button);
      head.appendChild(cell);
    });
    const body = table.createTBody();
    for (const i of this.order) {
      const row = body.insertRow();
      columns.forEach((_, c) => {
        const cell = row.insertCell();
        if (numeric[c]) cell.className = "number";
        const link = links[c];
        if (link !== null && this.data.rows[i][c]) {
          const anchor = document.createElement("a");
          anchor.href = this.data.rows[i][c];
          anchor.textContent = link;
          anchor.target = "_blank"; // as st.dataframe's link columns did: the table's page stays open
          anchor.rel = "noopener";
          cell.appendChild(anchor);
        } else {
          cell.textContent = text[i][c];
        }
      });
    }
    this.wrapper.replaceChildren(table);
  }
}

export default function ({ data, parentElement }) {
  parentElement.attnTable ??= new SortableTable(parentElement);
  parentElement.attnTable.show(data);
}
