// Building the page: text from the tuning log always goes in as text nodes, never as markup.

const SVG = "http://www.w3.org/2000/svg";

function fill(element, props, children) {
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") element.setAttribute("class", value);
    else if (key === "dataset") Object.assign(element.dataset, value);
    else if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
  return element;
}

/** An HTML element: h("td", {class: "num"}, "12", h("small", {}, "ms")). */
export function h(tag, props = {}, ...children) {
  return fill(document.createElement(tag), props, children);
}

/** An SVG element, built the same way. */
export function svg(tag, props = {}, ...children) {
  return fill(document.createElementNS(SVG, tag), props, children);
}

/** A list of [term, value] pairs. */
export function facts(pairs) {
  const items = pairs.map(([term, value]) => [h("dt", {}, term), h("dd", {}, value)]);
  return h("dl", { class: "facts" }, items);
}

/** A table with a header row and the given rows (or one row saying it is empty). */
export function table(headers, rows, empty) {
  const body = rows.length
    ? rows
    : [h("tr", {}, h("td", { colspan: headers.length, class: "muted" }, empty))];
  return h(
    "table",
    {},
    h("thead", {}, h("tr", {}, headers.map((name) => h("th", { scope: "col" }, name)))),
    h("tbody", {}, body),
  );
}
