// Buffered vs O_DIRECT writes of 10,000 new files of 4-64 KiB, then syncfs (issue 13).
//   gcc -O2 small-direct.c -o small-direct && ./small-direct DIR-THAT-DOES-NOT-EXIST 0   (1: O_DIRECT)
#define _GNU_SOURCE
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
static double now(){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec/1e9;}
static double cpu(){struct rusage r; getrusage(RUSAGE_SELF,&r); return r.ru_utime.tv_sec+r.ru_utime.tv_usec/1e6+r.ru_stime.tv_sec+r.ru_stime.tv_usec/1e6;}
static void sysc(long long *busy,long long *tot){FILE*f=fopen("/proc/stat","r"); long long v[10]={0}; fscanf(f,"cpu %lld %lld %lld %lld %lld %lld %lld %lld",&v[0],&v[1],&v[2],&v[3],&v[4],&v[5],&v[6],&v[7]); fclose(f); *tot=0; for(int i=0;i<8;i++)*tot+=v[i]; *busy=*tot-v[3]-v[4];}
int main(int argc,char**argv){ int n=10000; int direct=atoi(argv[2]); char *buf; posix_memalign((void**)&buf,4096,65536+4096); memset(buf,7,65536+4096);
 mkdir(argv[1],0755); int root=open(argv[1],O_DIRECTORY|O_RDONLY);
 unsigned long long x=7; long long b0,t0s,b1,t1s; sysc(&b0,&t0s);
 double t0=now(), c0=cpu(); int dfd=-1;
 for(int i=0;i<n;i++){ if(i%100==0){char dn[32]; sprintf(dn,"d%03d",i/100); mkdirat(root,dn,0755); if(dfd>=0)close(dfd); dfd=openat(root,dn,O_DIRECTORY|O_RDONLY);}
   x^=x<<13; x^=x>>7; x^=x<<17; size_t sz=4096+x%61441;
   char nm[64]; sprintf(nm,"f%06d",i);
   if(!direct){ int fd=openat(dfd,nm,O_CREAT|O_EXCL|O_RDWR,0600); pwrite(fd,buf,sz,0); close(fd);} 
   else { int fd=openat(dfd,nm,O_CREAT|O_EXCL|O_RDWR|O_DIRECT,0600); size_t al=(sz+4095)&~4095UL; if(pwrite(fd,buf,al,0)!=(ssize_t)al) perror("dio"); ftruncate(fd,sz); close(fd);} }
 double t1=now(), c1=cpu(); syncfs(root); double t2=now(), c2=cpu(); sysc(&b1,&t1s);
 printf("%s: write %.0f ms cpu %.0f ms; syncfs %.0f ms; process cpu %.1f us/file; system busy over all %.0f ms of %.0f ms\n", direct?"O_DIRECT":"buffered", (t1-t0)*1e3, (c1-c0)*1e3, (t2-t1)*1e3, (c2-c0)*1e6/n, (b1-b0)*10.0, (t1s-t0s)*10.0);
 return 0;}
