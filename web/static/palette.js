// One colour per run wherever several runs are drawn together (the compare
// view and the post-mortem report read this same list): run i of a comparison
// is PALETTE[i]. Picked greedily for the largest smallest CIEDE2000 distance
// to every colour before it (17.6 at worst across all 24), dark enough to read
// on white; the first two are the run page's blue and orange. Kept a plain
// list of "#rrggbb" lines: a test checks the report uses the same one.
export const PALETTE = [
  "#1f6feb",
  "#d4770c",
  "#00cc44",
  "#224422",
  "#880033",
  "#ff77aa",
  "#00bbcc",
  "#aa00cc",
  "#664422",
  "#888800",
  "#444455",
  "#ee1122",
  "#bb99ff",
  "#008866",
  "#117788",
  "#2233aa",
  "#996688",
  "#33aaff",
  "#ff22ff",
  "#dd8877",
  "#662266",
  "#337700",
  "#dd1166",
  "#991100",
];

// Past the palette, colours come round again dashed, so run 25 is not run 1.
export const runColor = (i) => PALETTE[i % PALETTE.length];
export const runDash = (i) => (i < PALETTE.length ? undefined : [6, 3]);
