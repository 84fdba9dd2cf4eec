set terminal pngcairo size 1200,500 noenhanced
set output 'frontier.png'
set multiplot layout 1,2 title 'Accuracy and cost, long model 8K, 80 samples (mean over families)'
set key bottom right
set ylabel 'score'
set yrange [0:100]
set xlabel 'prefill + second pass + press (s per sample)'
plot 'frontier.dat' index 0 using 1:3 with linespoints pt 3 ps 2 lc rgb '#000000' title 'full cache', 'frontier.dat' index 1 using 1:3 with linespoints pt 7 ps 1 lc rgb '#009e73' title 'primekv', 'frontier.dat' index 2 using 1:3 with linespoints pt 7 ps 1 lc rgb '#56b4e9' title 'keydiff', 'frontier.dat' index 3 using 1:3 with linespoints pt 7 ps 1 lc rgb '#e69f00' title 'streamingllm', 'frontier.dat' index 4 using 1:3 with linespoints pt 7 ps 1 lc rgb '#f0e442' title 'knorm', 'frontier.dat' index 5 using 1:3 with linespoints pt 7 ps 1 lc rgb '#0072b2' title 'expected_attention', 'frontier.dat' index 6 using 1:3 with linespoints pt 7 ps 1 lc rgb '#d55e00' title 'lagkv', 'frontier.dat' index 7 using 1:3 with linespoints pt 7 ps 1 lc rgb '#cc79a7' title 'curdkv', 'frontier.dat' index 8 using 1:3 with linespoints pt 7 ps 1 lc rgb '#8c564b' title 'kvzip'
set xlabel 'KV cache kept (MiB)'
plot 'frontier.dat' index 0 using 2:3 with linespoints pt 3 ps 2 lc rgb '#000000' title 'full cache', 'frontier.dat' index 1 using 2:3 with linespoints pt 7 ps 1 lc rgb '#009e73' title 'primekv', 'frontier.dat' index 2 using 2:3 with linespoints pt 7 ps 1 lc rgb '#56b4e9' title 'keydiff', 'frontier.dat' index 3 using 2:3 with linespoints pt 7 ps 1 lc rgb '#e69f00' title 'streamingllm', 'frontier.dat' index 4 using 2:3 with linespoints pt 7 ps 1 lc rgb '#f0e442' title 'knorm', 'frontier.dat' index 5 using 2:3 with linespoints pt 7 ps 1 lc rgb '#0072b2' title 'expected_attention', 'frontier.dat' index 6 using 2:3 with linespoints pt 7 ps 1 lc rgb '#d55e00' title 'lagkv', 'frontier.dat' index 7 using 2:3 with linespoints pt 7 ps 1 lc rgb '#cc79a7' title 'curdkv', 'frontier.dat' index 8 using 2:3 with linespoints pt 7 ps 1 lc rgb '#8c564b' title 'kvzip'
unset multiplot
